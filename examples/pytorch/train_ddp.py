"""A short PyTorch DDP training job traced by detnccl (see README.md in this folder for the command lines).

Each rank trains the same small MLP on its shard of a fixed synthetic regression task; DDP all-reduces the
gradients through NCCL, where the detnccl shim (LD_PRELOAD) fingerprints every buffer. Under `detnccl run` records
carry the optimizer's step with no code at all (docs/python.md); this job also marks each training step itself with
detnccl_step.set_step(), the explicit way, so that a run resumed from a checkpoint carries the same step numbers as
the run it resumes (its optimizer would count from 0 again). --no-step-marks leaves the numbering to the optimizer.
Without the shim the same script runs unchanged.

    torchrun --nproc-per-node N train_ddp.py [--steps 50] [--checkpoint-every 10] [--resume-from PATH]
                                             [--no-step-marks]
"""

import argparse
import os
import sys

# torch.use_deterministic_algorithms(True) makes cuBLAS raise unless its workspace is fixed; this must be set before
# the first cuBLAS call. A value the user chose is kept.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

# detnccl_step.py lives in the repository's interpose/python/; copy it next to your own scripts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "interpose", "python"))
import detnccl_step  # noqa: E402


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=256, help="global batch, split over the ranks")
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--resume-from", default=None, help="a checkpoint file written by this script")
    parser.add_argument("--no-step-marks", action="store_true",
                        help="do not call detnccl_step.set_step: steps come from optimizer.step() (detnccl run)")
    return parser.parse_args()


def synthetic_batch(step, rank, world, batch, device):
    # The same data on every run: a generator seeded by (step, rank).
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(batch // world, 64, generator=generator)
    y = x[:, :8].sum(dim=1, keepdim=True).sin()
    return x.to(device), y.to(device)


def main():
    args = parse_arguments()
    dist.init_process_group(backend="nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)  # local kernels too: detnccl covers the communication

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank])  # broadcasts rank 0's weights
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if args.resume_from:
        state = torch.load(args.resume_from, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]

    first_loss = last_loss = None
    for step in range(start, args.steps):
        if not args.no_step_marks:
            detnccl_step.set_step(step)
        x, y = synthetic_batch(step, rank, world, args.batch, device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradient buckets here
        optimizer.step()
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        last_loss = reduced.item() / world
        first_loss = last_loss if first_loss is None else first_loss
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: loss {last_loss:.5f}", flush=True)
        if args.checkpoint_every and (step + 1) % args.checkpoint_every == 0 and rank == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            path = os.path.join(args.checkpoint_dir, f"step-{step + 1:08d}.pt")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1},
                       path + ".tmp")
            os.replace(path + ".tmp", path)

    detnccl_step.flush()
    if rank == 0:
        print(f"loss went from {first_loss:.5f} to {last_loss:.5f}; detnccl shim loaded: {detnccl_step.active()}")
    dist.destroy_process_group()
    return 0 if last_loss < first_loss else 1


if __name__ == "__main__":
    sys.exit(main())
