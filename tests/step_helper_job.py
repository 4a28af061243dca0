"""A tiny Python job for the shim tests: one rank, NCCL through ctypes (hostnccl's libnccl.so.2, path in argv[1]),
an fp32 AllReduce at each of steps 3, 4 and 5 marked with detnccl_step.set_step. Prints whether the shim is active.

With --check-steps (argv[2]) it first hands set_step values it must refuse and values it must accept, printing one
line "step <repr>: <exception class or ok>" each (the same lines with or without the shim), then marks the steps 4
(followed by refused values, which must leave it unchanged), 2**64 - 1 and 0 around its three AllReduces."""

import ctypes
import sys

import detnccl_step

# Load NCCL into the global scope and call it through that scope, as a framework's own library (linked against
# libnccl.so.2) would: the preloaded shim comes first there. (Calling through the library's handle would bypass it.)
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
nccl = ctypes.CDLL(None)


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(result, what):
    if result != 0:
        raise SystemExit("%s failed with NCCL result %d" % (what, result))


uid = UniqueId()
check(nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
comm = ctypes.c_void_p()
check(nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0), "ncclCommInitRank")
count = 64
send = (ctypes.c_float * count)(*range(count))
recv = (ctypes.c_float * count)()


class Indexable:
    """Not an int, but usable as one (as NumPy integers are)."""

    def __index__(self):
        return 6


REFUSED = [-1, -(2**64), None, "abc", "3", float("nan"), float("inf"), 1.7, 2.0, True, False, 2**64, 2**64 + 5,
           [], b"1"]
ACCEPTED = [0, 7, 2**64 - 1, Indexable()]


def try_step(value):
    try:
        detnccl_step.set_step(value)
    except Exception as error:  # noqa: BLE001 - the class is what the test compares
        return type(error).__name__
    return "ok"


def all_reduce():
    check(nccl.ncclAllReduce(send, recv, ctypes.c_size_t(count), 7, 0, comm, None), "ncclAllReduce")
    if list(recv) != [float(i) for i in range(count)]:
        raise SystemExit("wrong AllReduce result")


if len(sys.argv) > 2 and sys.argv[2] == "--check-steps":
    for value in REFUSED + ACCEPTED:
        print("step %s: %s" % (repr(value) if not isinstance(value, Indexable) else "Indexable()", try_step(value)))
    detnccl_step.set_step(4)
    for value in REFUSED:
        try_step(value)
    all_reduce()  # step 4: no refused value changed it (2**64 + 5 is not step 5)
    detnccl_step.set_step(2**64 - 1)
    all_reduce()
    detnccl_step.set_step(0)
    all_reduce()
else:
    for step in (3, 4, 5):
        detnccl_step.set_step(step)
        all_reduce()
detnccl_step.flush()
check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
print("shim active:", detnccl_step.active())
