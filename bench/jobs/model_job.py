#!/usr/bin/env python3
"""A gandiva job for the migration benchmark (bench/migration_bench.cc): an
MLP of --layers x Linear(--width, --width) trained with Adam on random
batches, through gandiva.torch.Job, so the agent can checkpoint it at a
mini-batch boundary (exit 75) and a warm start can restore it. Its training
state is model + Adam state: 3 x 4 bytes per parameter, e.g. 6 x
Linear(2048, 2048) = 25.2M parameters = 288 MiB. With --device cuda the
model trains on the GPU, and a checkpoint copies it to host memory.

    /usr/bin/python3 bench/jobs/model_job.py --width 2048 --layers 6

Trains --steps mini-batches (0: forever). Prints `resumed from ... at step K`
after a restore and a line every --log-every steps. With --plain it does not
use the job-side library at all: a process that only CRIU can move.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

try:
    import gandiva.torch
except ImportError:  # run from a checkout: <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import gandiva.torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=0, help="0: forever")
    ap.add_argument("--min-step-ms", type=float, default=0.0,
                    help="pad each step to at least this long")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warmup", action="store_true",
                    help="no dummy step before a warm start's wait")
    ap.add_argument("--device", default="cpu",
                    help="cpu, cuda, or auto (cuda when there is one)")
    ap.add_argument("--plain", action="store_true",
                    help="no job-side library (only CRIU can move it)")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"

    # The slow setup a warm start does while the job still trains at its
    # source.
    torch.manual_seed(args.seed)
    layers = []
    for i in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if i + 1 < args.layers:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    nparams = sum(p.numel() for p in model.parameters())
    described = (f"model: {args.layers} x Linear({args.width}, {args.width}), "
                 f"{nparams / 1e6:.2f}M parameters, model + Adam state "
                 f"{nparams * 12 / 2**20:.1f} MiB, on {device}")

    def train_step() -> torch.Tensor:
        t0 = time.monotonic()
        x = torch.randn(args.batch_size, args.width, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        if device != "cpu":
            torch.cuda.synchronize()  # the step's real length
        pad = args.min_step_ms / 1000.0 - (time.monotonic() - t0)
        if pad > 0:
            time.sleep(pad)
        return loss

    if args.plain:
        print(described + ", without the job-side library", flush=True)
        step = 0
        while args.steps == 0 or step < args.steps:
            loss = train_step()
            step += 1
            if args.log_every and step % args.log_every == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
        print(f"done: {step} steps", flush=True)
        return 0

    job = gandiva.torch.Job(model, opt)

    def warmup():  # a warm start: the first real step then runs at speed
        model(torch.randn(args.batch_size, args.width,
                          device=device)).pow(2).mean().backward()
        opt.step()

    if job.start(warmup=None if args.no_warmup else warmup):
        print(f"resumed from {job.restored_from} at step {job.steps}",
              flush=True)
    else:
        print(described, flush=True)

    while args.steps == 0 or job.steps < args.steps:
        loss = train_step()
        job.step()  # the boundary: the agent's requests are served here
        if args.log_every and job.steps % args.log_every == 0:
            print(f"step {job.steps} loss {loss.item():.6f}", flush=True)
    print(f"done: {job.steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
