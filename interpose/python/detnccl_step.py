"""detnccl step marker for Python jobs: tells the detnccl shim which training step the following NCCL calls belong to.

Copy this file next to your training script (no build step, no dependency) and call ``set_step(step)`` at the start of
every step. When the job runs with ``LD_PRELOAD=libdetnccl.so`` the call stamps the step on every following record
(and ``DETNCCL_STEPS`` windows select by it); without the shim every function here does nothing, so the script runs
unchanged.

    import detnccl_step
    for step in range(start, steps):
        detnccl_step.set_step(step)
        ...
"""

import ctypes
import operator

__all__ = ["active", "set_step", "flush"]

# Steps are unsigned 64-bit numbers in the shim (detnccl_set_step(uint64_t)).
_STEP_LIMIT = 1 << 64


def _load_shim():
    # The preloaded shim's symbols are in the process's global scope: look them up there, never load anything.
    try:
        process = ctypes.CDLL(None)
        set_step = process.detnccl_set_step
        flush = process.detnccl_flush
    except (AttributeError, OSError):
        return None, None
    set_step.argtypes = [ctypes.c_uint64]
    set_step.restype = None
    flush.argtypes = []
    flush.restype = None
    return set_step, flush


_SET_STEP, _FLUSH = _load_shim()


def active():
    """True when the detnccl shim is loaded in this process."""
    return _SET_STEP is not None


def _checked_step(step):
    # The same checks with and without the shim: a script must not start failing only once it is traced.
    # RATIONALE: int() would accept "3" and truncate 1.7 to 1, and ctypes would wrap 2**64 + 5 to 5, each silently
    # recording a step the job never meant; bool is an int subclass but never a step.
    if isinstance(step, bool):
        raise TypeError("detnccl step must be an integer, not bool")
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError("detnccl step must be an integer, not %s" % type(step).__name__) from None
    if value < 0:
        raise ValueError("detnccl step must be non-negative, got %d" % value)
    if value >= _STEP_LIMIT:
        raise ValueError("detnccl step must be below 2**64, got a %d-bit number" % value.bit_length())
    return value


def set_step(step):
    """Marks the training step of the NCCL calls that follow.

    ``step`` is a non-negative integer below 2**64: an ``int`` or anything with ``__index__`` (a NumPy integer, say).
    ``bool``, ``float``, ``str`` and ``None`` raise ``TypeError``; a negative step or one of 2**64 or more raises
    ``ValueError``. The checks are the same whether or not the shim is loaded; a refused step changes nothing.
    """
    value = _checked_step(step)
    if _SET_STEP is not None:
        _SET_STEP(value)


def flush():
    """Asks the kernel to write the shim's log to disk now (it survives a crash of the job without this)."""
    if _FLUSH is not None:
        _FLUSH()
