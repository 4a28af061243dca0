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

__all__ = ["active", "set_step", "flush"]


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


def set_step(step):
    """Marks the training step of the NCCL calls that follow (a non-negative integer)."""
    if _SET_STEP is None:
        return
    step = int(step)
    if step < 0:
        raise ValueError("detnccl step must be non-negative, got %d" % step)
    _SET_STEP(step)


def flush():
    """Asks the kernel to write the shim's log to disk now (it survives a crash of the job without this)."""
    if _FLUSH is not None:
        _FLUSH()
