"""A PyTorch training job for tests/test_autostep.cc, with no detnccl code in it (but for --mode marked, which marks
its own steps with detnccl_step.set_step as a job may): each rank of hostnccl-run trains small torch.nn models on the
CPU and averages their gradients with ncclAllReduce, called through ctypes on the tensors' data pointers.

It writes what it did, in order, to PREFIX-RANK (--events PREFIX), for the test to compute the step each record must
carry: "construct NAME" (an optimizer), "step NAME" (after each NAME.step()), "mark N" (a set_step), "iteration K"
(an iteration starts), "call" (after each NCCL call). --mode notorch never imports torch and ends with the lines
"torch-imported 0|1" and "hook-armed 0|1" (whether detnccl's import hook is waiting for torch).

    autostep_job.py --mode plain|accumulate|gan|marked|notorch --nccl LIBNCCL --events PREFIX
                    [--iterations N] [--helper-dir DIR]
"""

import argparse
import ctypes
import os
import sys
import time

NCCL_FLOAT32 = 7
NCCL_SUM = 0


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", required=True, choices=["plain", "accumulate", "gan", "marked", "notorch"])
    parser.add_argument("--nccl", required=True, help="the libnccl.so.2 to load (hostnccl's)")
    parser.add_argument("--events", required=True)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--helper-dir", default=None, help="where detnccl_step.py is (--mode marked)")
    return parser.parse_args()


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Job:
    """One rank: its communicator and its record of events."""

    def __init__(self, args):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.events = open("%s-%d" % (args.events, self.rank), "w")
        # Load NCCL into the global scope and call it through that scope, as a framework linked against libnccl.so.2
        # does: the preloaded shim's wrappers come first there (the library's own handle would bypass them).
        ctypes.CDLL(args.nccl, mode=ctypes.RTLD_GLOBAL)
        self.nccl = ctypes.CDLL(None)
        self.nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.nccl.ncclBroadcast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.comm = None

    def event(self, text):
        self.events.write(text + "\n")

    def check(self, result, what):
        if result != 0:
            raise SystemExit("rank %d: %s failed with NCCL result %d" % (self.rank, what, result))

    def connect(self):
        """ncclCommInitRank with the unique id rank 0 publishes in HOSTNCCL_ID_FILE (written whole, then renamed)."""
        path = os.environ["HOSTNCCL_ID_FILE"]
        uid = UniqueId()
        if self.rank == 0:
            self.check(self.nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
            with open(path + ".tmp", "wb") as stream:
                stream.write(bytes(uid))
            os.replace(path + ".tmp", path)
        else:
            deadline = time.monotonic() + 60
            while not os.path.exists(path):
                if time.monotonic() > deadline:
                    raise SystemExit("rank %d: no unique id in %s" % (self.rank, path))
                time.sleep(0.01)
            with open(path, "rb") as stream:
                ctypes.memmove(ctypes.byref(uid), stream.read(128), 128)
        comm = ctypes.c_void_p()
        self.check(self.nccl.ncclCommInitRank(ctypes.byref(comm), self.world, uid, self.rank), "ncclCommInitRank")
        self.comm = comm

    def all_reduce(self, pointer, count):
        self.check(self.nccl.ncclAllReduce(pointer, pointer, count, NCCL_FLOAT32, NCCL_SUM, self.comm, None),
                   "ncclAllReduce")
        self.event("call")

    def broadcast(self, pointer, count):
        self.check(self.nccl.ncclBroadcast(pointer, pointer, count, NCCL_FLOAT32, 0, self.comm, None), "ncclBroadcast")
        self.event("call")

    def close(self):
        if self.comm is not None:
            self.check(self.nccl.ncclCommDestroy(self.comm), "ncclCommDestroy")
        self.events.close()


def run_without_torch(job, iterations):
    job.connect()
    values = (ctypes.c_float * 16)(*range(16))
    for iteration in range(iterations):
        job.event("iteration %d" % iteration)
        job.all_reduce(ctypes.addressof(values), 16)
    job.event("torch-imported %d" % ("torch" in sys.modules))
    job.event("hook-armed %d" % any(type(finder).__name__ == "DetncclOptimizerImportHook" for finder in sys.meta_path))


def run_with_torch(job, args):
    import torch

    torch.manual_seed(0)  # the same initial weights on every rank (the broadcast makes sure of it)

    def batch(iteration, part, features):
        generator = torch.Generator().manual_seed(1000 * iteration + 10 * part + job.rank)
        x = torch.randn(8, features, generator=generator)
        return x, x[:, :1].sin()

    def average_gradients(parameters):
        # One bucket, as DDP would: flattened, summed over the ranks, divided, copied back.
        grads = [p.grad for p in parameters]
        flat = torch.cat([g.reshape(-1) for g in grads]).contiguous()
        job.all_reduce(flat.data_ptr(), flat.numel())
        flat /= job.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def broadcast_parameters(module):
        with torch.no_grad():
            for p in module.parameters():
                job.broadcast(p.data_ptr(), p.numel())

    marker = None
    if args.mode == "marked":
        sys.path.insert(0, args.helper_dir)
        import detnccl_step

        def marker(step):
            detnccl_step.set_step(step)
            job.event("mark %d" % step)

    if args.mode in ("plain", "marked", "accumulate"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        # Two parameter groups: still one optimizer.
        optimizer = torch.optim.SGD([{"params": model[0].parameters()},
                                     {"params": model[2].parameters(), "lr": 0.02}], lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        job.event("construct model")
        if marker:
            marker(500)
        job.connect()
        broadcast_parameters(model)
        micro_batches = 4 if args.mode == "accumulate" else 1
        for iteration in range(args.iterations):
            job.event("iteration %d" % iteration)
            if marker:
                marker(1000 + 7 * iteration)
            accumulated = [torch.zeros_like(p) for p in model.parameters()]
            for part in range(micro_batches):
                x, y = batch(iteration, part, 8)
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                average_gradients(list(model.parameters()))  # one AllReduce per micro-batch
                for total, p in zip(accumulated, model.parameters()):
                    total += p.grad
            for total, p in zip(accumulated, model.parameters()):
                p.grad.copy_(total / micro_batches)
            optimizer.step()
            job.event("step model")
            scheduler.step()
        if abs(optimizer.param_groups[1]["lr"] - 0.02 * 0.5 ** (args.iterations // 2)) > 1e-12:
            raise SystemExit("the LR scheduler did not follow the optimizer's steps")
    elif args.mode == "gan":
        # A generator, a critic stepping 3 times per generator step, and a helper optimizer that steps once at the
        # start and is then forgotten (kept alive): the minimum rule, and its 64-step limit, on every call.
        generator = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
        critic = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        helper = torch.nn.Linear(8, 2)
        generator_optimizer = torch.optim.SGD(generator.parameters(), lr=0.01)
        job.event("construct generator")
        critic_optimizer = torch.optim.Adam(critic.parameters(), lr=0.001)
        job.event("construct critic")
        helper_optimizer = torch.optim.SGD(helper.parameters(), lr=0.1)
        job.event("construct helper")
        job.connect()
        for module in (generator, critic, helper):
            broadcast_parameters(module)
        x, _ = batch(0, 0, 8)
        helper_optimizer.zero_grad()
        helper(x).pow(2).mean().backward()
        average_gradients(list(helper.parameters()))
        helper_optimizer.step()
        job.event("step helper")
        for iteration in range(args.iterations):
            job.event("iteration %d" % iteration)
            for part in range(3):
                real, _ = batch(iteration, part, 8)
                noise, _ = batch(iteration, part + 5, 4)
                critic_optimizer.zero_grad()
                (critic(generator(noise).detach()).mean() - critic(real).mean()).backward()
                average_gradients(list(critic.parameters()))
                critic_optimizer.step()
                job.event("step critic")
            noise, _ = batch(iteration, 9, 4)
            generator_optimizer.zero_grad()
            (-critic(generator(noise)).mean()).backward()
            average_gradients(list(generator.parameters()))
            generator_optimizer.step()
            job.event("step generator")


def main():
    args = parse_arguments()
    job = Job(args)
    try:
        if args.mode == "notorch":
            run_without_torch(job, args.iterations)
        else:
            run_with_torch(job, args)
    finally:
        job.close()


if __name__ == "__main__":
    main()
