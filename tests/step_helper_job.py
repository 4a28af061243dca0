"""A tiny Python job for the shim tests: one rank, NCCL through ctypes (hostnccl's libnccl.so.2, path in argv[1]),
an fp32 AllReduce at each of steps 3, 4 and 5 marked with detnccl_step.set_step. Prints whether the shim is active."""

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
for step in (3, 4, 5):
    detnccl_step.set_step(step)
    check(nccl.ncclAllReduce(send, recv, ctypes.c_size_t(count), 7, 0, comm, None), "ncclAllReduce")
    if list(recv) != [float(i) for i in range(count)]:
        raise SystemExit("wrong AllReduce result")
detnccl_step.flush()
check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
print("shim active:", detnccl_step.active())
