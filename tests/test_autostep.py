"""Unit tests of detnccl_autostep (interpose/python/autostep): the step rule against a plain reference implementation,
the torch >= 2.0 path through a stand-in torch.optim.optimizer with global step hooks (this machine's torch is 1.13),
and the torch 1.13 path on the real torch: construction, LR schedulers, subclasses calling super().step(), a step
that raises, parameter groups. Run by ctest (autostep_python) with /usr/bin/python3:

    test_autostep.py AUTOSTEP_DIR [unittest arguments]

PyTorch missing is a failure that says to run scripts/install-deps.sh, never a skip.
"""

import collections
import gc
import random
import sys
import types
import unittest

sys.path.insert(0, sys.argv.pop(1))
import detnccl_autostep  # noqa: E402

STALE = detnccl_autostep.STALE_AFTER_STEPS


class Optimizer:
    """Anything with an identity stands for an optimizer in the rule."""


def reference_minimum(counts, seen):
    """The rule as written: the minimum count over optimizers that have stepped and are not stale, where an
    optimizer is stale when another has taken more than STALE steps since its last step (seen: each optimizer's
    view of every count at its last step)."""
    live = [name for name in counts
            if not any(counts[other] - seen[name].get(other, 0) > STALE for other in counts)]
    return min(counts[name] for name in live)


class StepRule(unittest.TestCase):
    def setUp(self):
        self.reports = []
        self.counter = detnccl_autostep.StepCounter(self.reports.append)

    def test_one_optimizer_counts_its_steps_from_construction(self):
        optimizer = Optimizer()
        self.assertIsNone(self.counter.reported)
        self.counter.constructed()
        self.counter.constructed()  # a second optimizer: no new report
        for _ in range(5):
            self.counter.stepped(optimizer)
        self.assertEqual(self.reports, [0, 1, 2, 3, 4, 5])

    def test_a_critic_stepping_five_times_per_generator_step(self):
        critic, generator = Optimizer(), Optimizer()
        self.counter.constructed()
        during = collections.defaultdict(set)  # iteration -> steps in force during it
        for iteration in range(10):
            during[iteration].add(self.counter.reported)
            for _ in range(5):
                self.counter.stepped(critic)
                during[iteration].add(self.counter.reported)
            self.counter.stepped(generator)
        self.assertEqual(during[0], {0, 1, 2, 3, 4, 5})  # only the critic had stepped
        for iteration in range(1, 10):
            self.assertEqual(during[iteration], {iteration}, iteration)
        self.assertEqual(self.counter.reported, 10)

    def test_a_forgotten_optimizer_leaves_after_more_than_the_limit_of_others_steps(self):
        forgotten, active = Optimizer(), Optimizer()
        self.counter.stepped(forgotten)
        for step in range(1, STALE + 1):
            self.assertEqual(self.counter.stepped(active), 1, step)  # still held back at the limit
        self.assertEqual(self.counter.stepped(active), STALE + 1)  # one more: it leaves
        self.assertEqual(self.counter.stepped(forgotten), 2)  # back in from its next step
        self.assertEqual(self.counter.stepped(active), 2)

    def test_a_collected_optimizer_leaves_at_the_next_step(self):
        kept, dropped = Optimizer(), Optimizer()
        self.counter.stepped(dropped)
        for _ in range(3):
            self.counter.stepped(kept)
        self.assertEqual(self.counter.reported, 1)
        del dropped
        gc.collect()
        self.assertEqual(self.reports[-1], 1, "a collection alone reports nothing")
        self.assertEqual(self.counter.stepped(kept), 4)

    def test_a_new_object_at_a_collected_ones_address_starts_from_zero(self):
        for round_ in range(20):
            optimizer = Optimizer()
            self.counter.stepped(optimizer)
            self.counter.stepped(optimizer)
            self.assertEqual(self.counter.reported, 2, round_)
            del optimizer  # the next Optimizer() often gets the same id()

    def test_the_step_agrees_with_the_reference_rule_on_random_jobs(self):
        generator = random.Random(16)
        for job in range(40):
            counter = detnccl_autostep.StepCounter(lambda step: None)
            optimizers = {}
            counts, seen = {}, {}
            for _ in range(generator.randrange(50, 400)):
                action = generator.random()
                if action < 0.03 and optimizers:  # an optimizer is collected
                    name = generator.choice(sorted(optimizers))
                    del optimizers[name]
                    counts.pop(name, None)
                    seen.pop(name, None)
                    for view in seen.values():  # a later optimizer of the same name is another one
                        view.pop(name, None)
                    continue
                if action < 0.1 or not optimizers:
                    name = "o%d" % generator.randrange(1000)
                    optimizers.setdefault(name, Optimizer())
                # Skewed choice: some optimizers step far more often than others (critics, forgotten ones).
                names = sorted(optimizers)
                name = names[min(int(generator.expovariate(0.7)), len(names) - 1)]
                counts[name] = counts.get(name, 0) + 1
                seen[name] = dict(counts)
                step = counter.stepped(optimizers[name])
                self.assertEqual(step, reference_minimum(counts, seen), "job %d" % job)
                self.assertEqual(counter.reported, step)

    def test_many_optimizers_stepping_in_turn_keep_the_heap_small(self):
        optimizers = [Optimizer() for _ in range(300)]  # one per parameter, stepped in the backward pass
        for iteration in range(1, 6):
            for optimizer in optimizers:
                self.counter.stepped(optimizer)
            self.assertEqual(self.counter.reported, iteration)
        self.assertLessEqual(len(self.counter._heap), 2 * len(optimizers) + 16)


def stand_in_torch_2():
    """A torch.optim.optimizer module with torch 2's global step hooks: step() of each class wrapped once at
    construction, pre hooks, the step, post hooks (skipped when the step raises)."""
    module = types.ModuleType("torch.optim.optimizer")
    pre_hooks, post_hooks = {}, {}

    def register_optimizer_step_pre_hook(hook):
        pre_hooks[len(pre_hooks)] = hook

    def register_optimizer_step_post_hook(hook):
        post_hooks[len(post_hooks)] = hook

    class Optimizer2:
        def __init__(self, params, defaults):
            self.param_groups = [{"params": list(params)}]
            cls = type(self)
            if not getattr(cls.step, "hooked", False):
                original = cls.step

                def wrapper(*args, **kwargs):
                    for hook in pre_hooks.values():
                        hook(args[0], args, kwargs)
                    out = original(*args, **kwargs)
                    for hook in post_hooks.values():
                        hook(args[0], args, kwargs)
                    return out

                wrapper.hooked = True
                cls.step = wrapper

        def step(self):
            raise NotImplementedError

    module.Optimizer = Optimizer2
    module.register_optimizer_step_pre_hook = register_optimizer_step_pre_hook
    module.register_optimizer_step_post_hook = register_optimizer_step_post_hook
    return module


class GlobalStepHooks(unittest.TestCase):
    """torch >= 2.0 (a stand-in): the global hooks count each outermost step() once."""

    def setUp(self):
        self.module = stand_in_torch_2()
        self.reports = []
        detnccl_autostep.install(self.module, self.reports.append)

    def test_steps_subclasses_scaler_skips_and_a_step_that_raises(self):
        Optimizer2 = self.module.Optimizer

        class Plain(Optimizer2):
            def step(self):
                return "stepped"

        class Calling(Plain):
            def step(self):  # its own step around its base class's, both wrapped by "torch"
                return super().step()

        class Failing(Optimizer2):
            fail = True

            def step(self):
                if self.fail:
                    raise RuntimeError("no")

        class Scaled(Optimizer2):
            _step_supports_amp_scaling = True
            found_inf = None

            def step(self):
                pass

        plain = Plain([1], {})
        self.assertEqual(self.reports, [0])
        self.assertEqual(plain.step(), "stepped")
        self.assertEqual(self.reports, [0, 1])
        Plain([2], {})  # unused: never stepped, never in the minimum
        plain.step()
        self.assertEqual(self.reports, [0, 1, 2])
        del plain
        gc.collect()
        calling = Calling([3], {})
        calling.step()  # the subclass's step() and its base's: one step
        self.assertEqual(self.reports, [0, 1, 2, 1], "the collected one has left; calling took 1 step")
        calling.step()
        self.assertEqual(self.reports, [0, 1, 2, 1, 2])
        del calling
        gc.collect()
        failing = Failing([4], {})
        with self.assertRaises(RuntimeError):
            failing.step()  # did not return: not a step, and what it left behind is dropped
        failing.fail = False
        failing.step()
        self.assertEqual(self.reports[-1], 1)
        failing.step()
        self.assertEqual(self.reports[-1], 2)
        scaled = Scaled([5], {})
        scaled.found_inf = FakeFlag(1)  # the scaler found infs: the optimizer did not step
        scaled.step()
        self.assertEqual(self.reports[-1], 2)
        scaled.found_inf = FakeFlag(0)
        scaled.step()
        self.assertEqual(self.reports[-1], 1, "min(failing 2, scaled 1)")
        failing.step()
        scaled.step()
        self.assertEqual(self.reports[-1], 2, "min(failing 3, scaled 2)")
        self.assertEqual(self.reports, [0, 1, 2, 1, 2, 1, 2, 1, 2])

    def test_a_failure_of_ours_is_one_line_and_the_job_goes_on(self):
        import io
        module = stand_in_torch_2()

        def report(step):
            raise RuntimeError("the shim\nis gone")

        detnccl_autostep.install(module, report)
        plain = type("Plain", (module.Optimizer,), {"step": lambda self: "stepped"})
        stderr, sys.stderr = sys.stderr, io.StringIO()
        try:
            optimizer = plain([1], {})
            self.assertEqual(optimizer.step(), "stepped")
            self.assertEqual(optimizer.step(), "stepped")
            said = sys.stderr.getvalue()
        finally:
            sys.stderr = stderr
        self.assertEqual(said, "detnccl: PyTorch optimizer steps are no longer tracked (optimizer construction: "
                               "RuntimeError: the shim is gone)\n")

    def test_installs_once(self):
        detnccl_autostep.install(self.module, self.reports.append)
        optimizer = type("Plain", (self.module.Optimizer,), {"step": lambda self: None})([1], {})
        optimizer.step()
        self.assertEqual(self.reports, [0, 1])


class FakeFlag:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


def import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as error:
        raise AssertionError("PyTorch is not importable by %s (%s): run scripts/install-deps.sh, which installs "
                             "python3-torch" % (sys.executable, error)) from None
    return torch


class OlderTorch(unittest.TestCase):
    """The real torch (Debian's 1.13): no global step hooks, so each class's step is wrapped."""

    reports = []

    @classmethod
    def setUpClass(cls):
        cls.torch = import_torch()
        cls.optimizer_module = sys.modules["torch.optim.optimizer"]  # torch.optim deletes the name of its module
        if not hasattr(cls.optimizer_module, "register_optimizer_step_post_hook"):
            detnccl_autostep.install(cls.optimizer_module, cls.reports.append)

    def setUp(self):
        if hasattr(self.optimizer_module, "register_optimizer_step_post_hook"):
            self.fail("this test is for torch without global step hooks; this one is %s" % self.torch.__version__)
        gc.collect()  # optimizers of earlier tests leave the minimum
        self.model = self.torch.nn.Sequential(self.torch.nn.Linear(3, 4), self.torch.nn.Linear(4, 1))

    def train_step(self, optimizer):
        optimizer.zero_grad()
        self.model(self.torch.ones(2, 3)).sum().backward()
        optimizer.step()

    def test_groups_schedulers_and_the_profiler_wrapper(self):
        torch = self.torch
        optimizer = torch.optim.SGD([{"params": self.model[0].parameters()},
                                     {"params": self.model[1].parameters(), "lr": 0.5}], lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        before = self.model[0].weight.detach().clone()
        for step in range(1, 4):
            self.train_step(optimizer)
            scheduler.step()
            self.assertEqual(self.reports[-1], step)
        self.assertFalse(torch.equal(before, self.model[0].weight), "the optimizer still steps")
        self.assertEqual(optimizer._step_count, 3, "the scheduler's counting wrapper still runs")
        self.assertAlmostEqual(optimizer.param_groups[1]["lr"], 0.5 * 0.5 ** 3)
        self.assertTrue(getattr(type(optimizer).step, "hooked", False), "torch's profiler wrapper is not redone")

    def test_a_subclass_calling_super_step_counts_once_and_a_raising_step_not_at_all(self):
        torch = self.torch
        torch.optim.Adam(self.model.parameters())  # the base class is wrapped too

        class Clipped(torch.optim.Adam):
            fail = False

            def step(self, closure=None):
                if self.fail:
                    raise RuntimeError("no")
                return super().step(closure)

        optimizer = Clipped(self.model.parameters())
        self.train_step(optimizer)
        self.assertEqual(self.reports[-1], 1)
        self.train_step(optimizer)
        self.assertEqual(self.reports[-1], 2)
        optimizer.fail = True
        with self.assertRaises(RuntimeError):
            self.train_step(optimizer)
        optimizer.fail = False
        self.train_step(optimizer)
        self.assertEqual(self.reports[-1], 3)

    def test_a_closure_evaluated_several_times_is_one_step(self):
        torch = self.torch
        optimizer = torch.optim.LBFGS(self.model.parameters(), max_iter=3)
        evaluations = []

        def closure():
            evaluations.append(1)
            optimizer.zero_grad()
            loss = self.model(torch.ones(2, 3)).pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        self.assertEqual(self.reports[-1], 1)
        optimizer.step(closure)
        self.assertEqual(self.reports[-1], 2)
        self.assertGreater(len(evaluations), 2)

    def test_an_unpickled_optimizer_of_a_class_never_constructed_is_counted(self):
        import copy

        class Unpickled(self.torch.optim.SGD):
            def step(self, closure=None):  # its own step, not the wrapped one of SGD
                return None

        original = self.torch.optim.SGD(self.model.parameters(), lr=0.1)
        original.__class__ = Unpickled
        copied = copy.deepcopy(original)  # __setstate__, never __init__: Unpickled's step is wrapped there
        del original
        gc.collect()
        self.train_step(copied)
        self.assertEqual(self.reports[-1], 1)
        self.train_step(copied)
        self.assertEqual(self.reports[-1], 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
