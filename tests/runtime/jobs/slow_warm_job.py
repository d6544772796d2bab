#!/usr/bin/env python3
"""A job whose warm start is slow: a tiny model trained forever through
gandiva.torch.Job, whose warmup (run only when it is started warm, as the
destination of a migration, before it waits for its checkpoint) sleeps
--warm-s seconds. For the end-to-end test of a kill that comes while a
migration waits for its new process.
"""

import argparse
import sys
import time

import torch

import gandiva.torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm-s", type=float, default=600)
    ap.add_argument("--tag", default="", help="ignored: names the run in ps")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    job = gandiva.torch.Job(model, opt)
    job.start(warmup=lambda: time.sleep(args.warm_s))
    print("training", flush=True)
    while True:
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.01)
        job.step()


if __name__ == "__main__":
    sys.exit(main())
