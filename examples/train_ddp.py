#!/usr/bin/env python3
"""A data-parallel (torch.distributed) gandiva job that can be resized.

A linear regression model trained with SGD + momentum on a fixed synthetic
data set (targets from a hidden linear map, so every run converges to the
same parameters). The data is a stream of samples: sample p is row
p % --dataset of the data set. Each step consumes a global batch of
(--batch-size x world size) samples starting at the job's sample position
(`job.samples`); rank r trains on its slice. The learning rate scales with
the world size. Because the position is counted in samples and kept in
checkpoints, a job resized to another world size (exit 76, restarted with
the new size and GANDIVA_RESUME_FROM) goes on with exactly the next sample.

Start it with the launcher (one rank per GPU; --nproc defaults to
$GANDIVA_WORLD_SIZE, which the agent sets):

    /usr/bin/python3 -m gandiva.launch --nproc 2 -- examples/train_ddp.py \\
        --samples 20000

Trains until --samples samples (exactly), printing progress; the last lines
are `done samples=N steps=S world_size=W` and `checksum=X` (a sum over the
parameters). Without torch.distributed env (WORLD_SIZE unset or 1) it runs
as one process.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

try:
    import gandiva.torch
except ImportError:  # run from a checkout: <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import gandiva.torch

FEATURES, OUTPUTS = 16, 4


def dataset(n: int):
    """A fixed data set: the same in every run and on every rank."""
    g = torch.Generator().manual_seed(2018)
    x = torch.randn(n, FEATURES, generator=g)
    w = torch.randn(FEATURES, OUTPUTS, generator=g)
    b = torch.randn(OUTPUTS, generator=g)
    return x, x @ w + b


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=20000,
                    help="train until this many samples (exactly)")
    ap.add_argument("--batch-size", type=int, default=8, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05,
                    help="base learning rate (x world size)")
    ap.add_argument("--dataset", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--min-step-ms", type=float, default=0.0,
                    help="pad each step to at least this long")
    ap.add_argument("--out", help="torch.save the final parameters here "
                    "(rank 0)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # NCCL when every rank has a GPU of its own, else all ranks on the CPU
    # over gloo (virtual GPUs, fewer GPUs than ranks, a GPU two ranks share).
    device = gandiva.torch.init_distributed()
    rank = dist.get_rank() if world > 1 else 0
    if rank == 0:
        backend = dist.get_backend() if world > 1 else "none"
        print(f"ddp: world size {world} on {device}, backend {backend}",
              flush=True)

    # Slow setup first (a warm start does it while the job still trains at
    # its source): data, model, optimizer.
    x_all, y_all = dataset(args.dataset)
    x_all, y_all = x_all.to(device), y_all.to(device)
    torch.manual_seed(args.seed)
    model = torch.nn.Linear(FEATURES, OUTPUTS).to(device)
    net = (torch.nn.parallel.DistributedDataParallel(model)
           if world > 1 else model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * world,
                          momentum=0.9)
    job = gandiva.torch.Job(model, opt)  # the module itself, not the wrapper
    if job.start():
        if job.restored_world_size != world:
            for group in opt.param_groups:  # rescale for the new size
                group["lr"] = args.lr * world
        if rank == 0:
            print(f"resumed from {job.restored_from} at samples={job.samples} "
                  f"steps={job.steps} (saved at world size "
                  f"{job.restored_world_size}, now {world})", flush=True)

    b = args.batch_size
    loss_value = float("nan")
    while job.samples < args.samples:
        t0 = time.monotonic()
        start = job.samples
        g = min(b * world, args.samples - start)  # the last one may be short
        lo, hi = min(start + rank * b, start + g), min(start + (rank + 1) * b,
                                                       start + g)
        idx = torch.arange(lo, hi, device=device) % args.dataset
        xb, yb = x_all[idx], y_all[idx]
        # Mean over the global batch: DDP averages the ranks' gradients.
        loss = ((net(xb) - yb) ** 2).mean(dim=1).sum() * (world / g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_value = loss.item() / world
        job.add_samples(g)
        pad = args.min_step_ms / 1000.0 - (time.monotonic() - t0)
        if pad > 0:
            time.sleep(pad)
        job.step()  # the boundary: the agent's requests are served here
        if rank == 0 and args.log_every and job.steps % args.log_every == 0:
            print(f"step {job.steps} samples {job.samples} world_size {world} "
                  f"loss {loss_value:.6f}", flush=True)

    if rank == 0:
        checksum = sum(p.detach().double().sum().item()
                       for p in model.parameters())
        print(f"done samples={job.samples} steps={job.steps} "
              f"world_size={world}", flush=True)
        print(f"checksum={checksum:.12f}", flush=True)
        if args.out:
            torch.save({k: v.cpu() for k, v in model.state_dict().items()},
                       args.out)
    if world > 1:
        # Every rank is done; leave without tearing the process group down
        # (a gloo teardown racing with a peer that already left can spin).
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
