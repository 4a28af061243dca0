"""detnccl's PyTorch optimizer step hook: the shim's step follows the job's optimizer steps, with no code change.

sitecustomize.py (beside this file) loads it when the job imports torch, and only when the detnccl shim is in the
process; install() then hooks torch.optim's optimizers. The rule (docs/python.md, "PyTorch steps"):

- The step is the number of optimizer steps the job has taken: each call of an optimizer's step() that returns adds
  one to that optimizer's count. An optimizer with several parameter groups is one optimizer. Micro-batches without
  step() (gradient accumulation) add nothing; a step that GradScaler skips adds nothing (GradScaler does not call
  step(); an optimizer that handles the scaler itself is not counted when the scaler's found_inf says it skipped).
- With several optimizers the step is the minimum of the counts of the live optimizers that have stepped. An
  optimizer leaves the minimum when it is garbage-collected, or when another optimizer has taken more than 64
  (STALE_AFTER_STEPS) steps since its own last step; it is back in from its next step.
- The shim is told 0 when the first optimizer is constructed, and the new minimum after each step() that changes
  it (detnccl_set_optimizer_step). A collected optimizer changes the minimum at the next step() of another.

torch >= 2.0 calls the hook from its global optimizer step hooks (register_optimizer_step_pre_hook and _post_hook);
older torch (1.13) gets each Optimizer subclass's step wrapped once, when its first instance is constructed.
Nothing here raises into the job: a failure is one line on stderr starting "detnccl:", and tracking stops.
"""

import collections
import functools
import heapq
import itertools
import os
import sys
import threading
import weakref

__all__ = ["STALE_AFTER_STEPS", "StepCounter", "install"]

# An optimizer leaves the minimum once another optimizer has taken more than this many steps since its last step.
STALE_AFTER_STEPS = 64


def _say(message):
    try:
        sys.stderr.write("detnccl: %s\n" % " ".join(str(message).split()))  # one line, whatever the error said
    except Exception:  # noqa: BLE001 - a closed stderr must not stop the job either
        pass


class _Tracked:
    """One optimizer that has stepped."""

    __slots__ = ("serial", "identity", "ref", "count", "last_event", "recent")

    def __init__(self, serial, identity, ref):
        self.serial = serial
        self.identity = identity  # id() of the optimizer, while it lives
        self.ref = ref  # a weak reference to it (a plain callable returning it when it takes no weak reference)
        self.count = 0
        self.last_event = 0  # the event number (one per counted step of any optimizer) of its last step
        # The event numbers of its last STALE_AFTER_STEPS + 1 steps: once full, the first is the step after which
        # every optimizer that has not stepped since is out of the minimum.
        self.recent = collections.deque(maxlen=STALE_AFTER_STEPS + 1)


class StepCounter:
    """The step rule, apart from torch: optimizers are any objects, reported steps go to `report(step)`.

    constructed() once per optimizer construction, stepped(optimizer) after each of its counted steps. Thread-safe.
    Each step costs O(log n) for n optimizers (a heap of counts, cleaned lazily), so a job with one optimizer per
    parameter (an optimizer step fused into the backward pass) stays cheap.
    """

    def __init__(self, report):
        self._report = report
        self._lock = threading.Lock()
        self._reported = None
        self._event = 0
        self._serials = itertools.count(1)
        self._tracked = {}  # serial -> _Tracked
        self._tracked_by_identity = {}  # id(optimizer) -> _Tracked
        self._collected = []  # serials of collected optimizers, appended by weak reference callbacks (any thread)
        # An optimizer whose last step has an event number below this is out of the minimum: the largest event
        # number after which some optimizer has taken more than STALE_AFTER_STEPS steps.
        self._stale_below = 0
        self._heap = []  # (count, last_event, serial); entries whose optimizer stepped again or left are skipped
        if hasattr(os, "register_at_fork"):
            # RATIONALE: a child forked while another thread held the lock would wait for it forever.
            os.register_at_fork(after_in_child=self._reset_lock_in_child)

    def _reset_lock_in_child(self):
        self._lock = threading.Lock()

    @property
    def reported(self):
        """The last step reported, or None before the first optimizer."""
        return self._reported

    def constructed(self):
        """An optimizer was constructed: the first one switches the numbering to optimizer steps (step 0)."""
        with self._lock:
            if self._reported is None:
                self._publish(0)

    def stepped(self, optimizer):
        """`optimizer` took one step; returns the step now in force."""
        with self._lock:
            self._forget_collected()
            tracked = self._tracked_by_identity.get(id(optimizer))
            if tracked is not None and tracked.ref() is not optimizer:
                self._forget(tracked)  # an object that had the same id() and whose collection we missed
                tracked = None
            if tracked is None:
                tracked = self._track(optimizer)
            self._event += 1
            tracked.count += 1
            tracked.last_event = self._event
            tracked.recent.append(self._event)
            if len(tracked.recent) == tracked.recent.maxlen:
                self._stale_below = max(self._stale_below, tracked.recent[0] + 1)
            heapq.heappush(self._heap, (tracked.count, tracked.last_event, tracked.serial))
            if len(self._heap) > 2 * len(self._tracked) + 16:
                self._rebuild_heap()
            minimum = self._minimum()
            if minimum != self._reported:
                self._publish(minimum)
            return minimum

    def _publish(self, step):
        self._report(step)
        self._reported = step

    def _track(self, optimizer):
        serial = next(self._serials)
        collected = self._collected

        def forget(_reference, serial=serial):
            collected.append(serial)  # atomic; the lock may be held by this very thread (collection inside stepped)

        try:
            ref = weakref.ref(optimizer, forget)
        except TypeError:  # an object without weak references: it never leaves by collection

            def ref(optimizer=optimizer):
                return optimizer

        tracked = _Tracked(serial, id(optimizer), ref)
        self._tracked[serial] = tracked
        self._tracked_by_identity[tracked.identity] = tracked
        return tracked

    def _forget(self, tracked):
        self._tracked.pop(tracked.serial, None)
        if self._tracked_by_identity.get(tracked.identity) is tracked:
            del self._tracked_by_identity[tracked.identity]

    def _forget_collected(self):
        if not self._collected:
            return
        while self._collected:
            tracked = self._tracked.get(self._collected.pop())
            if tracked is not None:
                self._forget(tracked)
        # The collected ones may have been what kept others out of the minimum: recompute from those left.
        self._stale_below = max([t.recent[0] + 1 for t in self._tracked.values() if len(t.recent) == t.recent.maxlen],
                                default=0)
        self._rebuild_heap()

    def _rebuild_heap(self):
        self._heap = [(t.count, t.last_event, t.serial) for t in self._tracked.values()
                      if t.last_event >= self._stale_below]
        heapq.heapify(self._heap)

    def _minimum(self):
        heap = self._heap
        while heap:
            count, last_event, serial = heap[0]
            tracked = self._tracked.get(serial)
            if tracked is not None and tracked.last_event == last_event and last_event >= self._stale_below:
                return count
            # RATIONALE: an entry that is out now stays out: its optimizer stepped since (a newer entry is in the
            # heap), was collected, or went stale (the bound only grows until a collection, which rebuilds the heap).
            heapq.heappop(heap)
        return self._reported  # not reached: the optimizer that just stepped is always in


def _skipped_by_grad_scaler(optimizer):
    # GradScaler calls step() of an optimizer that handles the scale itself (fused Adam) even when it found infs,
    # with found_inf set on it for the call (torch >= 2); the optimizer then leaves its parameters as they were.
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return False
    found_inf = getattr(optimizer, "found_inf", None)
    if found_inf is None:
        return False
    try:
        return bool(found_inf.item() if hasattr(found_inf, "item") else found_inf)
    except Exception:  # noqa: BLE001 - not the scaler's flag: the step counts
        return False


class _NestedSteps:
    """The optimizers whose step() is running on this thread, so that a step() that runs inside another step() of
    the same optimizer (a subclass's step calling super().step(), both hooked by torch) counts once. A call that
    raised never reaches its post hook: its entry is dropped once its frame is no longer on the thread's stack."""

    def __init__(self):
        self._local = threading.local()

    def _running(self):
        running = getattr(self._local, "running", None)
        if running is None:
            running = self._local.running = []
        if running:
            live = set()
            frame = sys._getframe(1)
            while frame is not None:
                live.add(id(frame))
                frame = frame.f_back
            running[:] = [(identity, frame) for identity, frame in running if id(frame) in live]
        return running

    def enter(self, optimizer, frame):
        self._running().append((id(optimizer), frame))

    def leave(self, optimizer):
        """Whether the step() that ends was the outermost one of this optimizer."""
        running = self._running()
        identity = id(optimizer)
        for index in range(len(running) - 1, -1, -1):
            if running[index][0] == identity:
                del running[index]
                break
        return all(other != identity for other, _ in running)


class _OptimizerHook:
    """What the patched torch calls: construction, and the end of each outermost step() of an optimizer."""

    def __init__(self, counter, wraps_steps):
        self._counter = counter
        self._wraps_steps = wraps_steps  # torch without global step hooks: wrap each class's step
        self._failed = False
        self._stepping = threading.local()  # ids of the optimizers whose wrapped step() runs on this thread
        self._nested = _NestedSteps()

    def _fail(self, where, error):
        if not self._failed:
            self._failed = True
            _say("PyTorch optimizer steps are no longer tracked (%s: %s: %s)" % (where, type(error).__name__, error))

    def constructed(self, optimizer):
        if self._failed:
            return
        try:
            if self._wraps_steps:
                self._wrap_step_of(type(optimizer))
            self._counter.constructed()
        except Exception as error:  # noqa: BLE001
            self._fail("optimizer construction", error)

    def stepped(self, optimizer):
        if self._failed:
            return
        try:
            if not _skipped_by_grad_scaler(optimizer):
                self._counter.stepped(optimizer)
        except Exception as error:  # noqa: BLE001
            self._fail("optimizer step", error)

    # torch >= 2.0: the global step hooks.
    def global_pre_hook(self, optimizer, args, kwargs):
        if not self._failed:
            try:
                self._nested.enter(optimizer, sys._getframe(1))
            except Exception as error:  # noqa: BLE001
                self._fail("optimizer step", error)
        return None

    def global_post_hook(self, optimizer, args, kwargs):
        if self._failed:
            return
        try:
            outermost = self._nested.leave(optimizer)
        except Exception as error:  # noqa: BLE001
            self._fail("optimizer step", error)
            return
        if outermost:
            self.stepped(optimizer)

    # Older torch: each class's step, wrapped once.
    def _wrap_step_of(self, optimizer_class):
        step = optimizer_class.step
        if getattr(step, "_detnccl_counts_steps", False):
            return  # wrapped already, here or in a base class it inherits step from
        optimizer_class.step = self._counting(step)

    def _counting(self, step):
        hook = self
        stepping = self._stepping

        # RATIONALE: functools.wraps keeps what torch put on the function (its profiler's `hooked`, so that torch does
        # not wrap it again); a plain function, so LR schedulers can rebind it to the optimizer as they do.
        @functools.wraps(step)
        def counted_step(optimizer, *args, **kwargs):
            running = getattr(stepping, "ids", None)
            if running is None:
                running = stepping.ids = set()
            identity = id(optimizer)
            if identity in running:  # a step() inside this optimizer's own step(): super().step()
                return step(optimizer, *args, **kwargs)
            running.add(identity)
            try:
                result = step(optimizer, *args, **kwargs)
            finally:
                running.discard(identity)
            hook.stepped(optimizer)
            return result

        counted_step._detnccl_counts_steps = True
        return counted_step


def install(optimizer_module, set_optimizer_step):
    """Hooks torch.optim.optimizer (the module, just loaded) so that every optimizer's steps reach
    `set_optimizer_step(step)` by the rule above. Installs once per process; raises on a torch it cannot hook
    (the caller says so on stderr)."""
    optimizer_class = optimizer_module.Optimizer
    if getattr(optimizer_class.__init__, "_detnccl_hooked", False):
        return
    pre = getattr(optimizer_module, "register_optimizer_step_pre_hook", None)
    post = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    global_hooks = callable(pre) and callable(post)
    hook = _OptimizerHook(StepCounter(set_optimizer_step), wraps_steps=not global_hooks)

    original_init = optimizer_class.__init__
    original_setstate = getattr(optimizer_class, "__setstate__", None)

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        hook.constructed(self)

    __init__._detnccl_hooked = True
    optimizer_class.__init__ = __init__
    if original_setstate is not None:
        # An unpickled optimizer (torch.load of a whole optimizer) is constructed without __init__.
        @functools.wraps(original_setstate)
        def __setstate__(self, state):
            original_setstate(self, state)
            hook.constructed(self)

        optimizer_class.__setstate__ = __setstate__
    if global_hooks:
        pre(hook.global_pre_hook)
        post(hook.global_post_hook)
