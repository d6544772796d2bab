"""A tiny PyTorch training job for the tests: a small MLP with dropout on a
shuffled synthetic dataset, trained through gandiva.torch.Job.

The tests play the agent. Hooks for them:
  --log FILE        append "begin i" / "end i" / "offload" / "reload" lines
  --hold-at K       during batch K, create --hold-file and wait for
                    --release-file to exist (the test acts meanwhile)
  --until-file F    train until F exists (instead of --steps)
  --out FILE        torch.save final params, steps and an RNG sample
"""

import argparse
import os
import sys
import time

import torch

import gandiva
import gandiva.torch


class LoggingJob(gandiva.torch.Job):
    log = None

    def offload(self):
        self.log("offload")
        super().offload()

    def reload(self):
        super().reload()
        self.log("reload")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--hold-at", type=int, default=-1)
    ap.add_argument("--hold-file")
    ap.add_argument("--release-file")
    ap.add_argument("--until-file")
    ap.add_argument("--batch-sleep", type=float, default=0.0)
    ap.add_argument("--out")
    ap.add_argument("--warmup", action="store_true",
                    help="pass Job.start a warmup that trains a dummy step")
    args = ap.parse_args()

    log_fd = (os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
              if args.log else None)

    def log(line):
        if log_fd is not None:
            os.write(log_fd, (line + "\n").encode())

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)  # the data never changes
    x = torch.randn(40, 8, generator=g)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    LoggingJob.log = staticmethod(log)
    job = LoggingJob(model, opt)

    def warmup():
        # Everything it touches must be replaced by the checkpoint: the
        # parameters (an optimizer step), the RNG (dropout, randn).
        loss = model(torch.randn(8, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        print("warmup ran", flush=True)

    job.start(warmup=warmup if args.warmup else None)

    steps = args.steps if not args.until_file else 10**9
    deadline = time.monotonic() + 120
    for _ in job.epochs(10**9):
        for xb, yb in job.batches(loader, max_steps=steps):
            i = job.steps
            log(f"begin {i}")
            if i == args.hold_at:
                open(args.hold_file, "w").close()
                while not os.path.exists(args.release_file):
                    if time.monotonic() > deadline:
                        sys.exit(92)
                    time.sleep(0.001)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if args.batch_sleep:
                time.sleep(args.batch_sleep)
            log(f"end {i}")
            if args.until_file and os.path.exists(args.until_file):
                break
        if job.steps >= steps or (args.until_file and
                                  os.path.exists(args.until_file)):
            break
        if time.monotonic() > deadline:
            sys.exit(93)

    if args.out:
        torch.save({"model": model.state_dict(), "steps": job.steps,
                    "rng_sample": torch.rand(4)}, args.out)
    print(f"steps {job.steps} minibatches {gandiva.minibatches()}", flush=True)


if __name__ == "__main__":
    main()
