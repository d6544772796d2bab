"""A data-parallel job (gloo) whose rank --fail-rank exits with status 3
after --fail-after all-reduces; the other ranks all-reduce until then (and
fail when their peer is gone). Started by python -m gandiva.launch."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fail-rank", type=int, default=1)
    ap.add_argument("--fail-after", type=int, default=50)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} of {dist.get_world_size()} up", flush=True)
    t = torch.ones(4)
    for i in range(1_000_000):
        if rank == args.fail_rank and i == args.fail_after:
            print(f"rank {rank} fails", flush=True)
            os._exit(3)
        dist.all_reduce(t)
        time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
