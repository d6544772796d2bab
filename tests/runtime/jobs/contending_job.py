#!/usr/bin/env python3
"""A job for end-to-end tests whose mini-batches slow down while another job
is active on the same (virtual) GPU, as two compute-bound jobs would on a
real one: each step takes --step-ms alone and --slowdown times that while
another job's heartbeat is fresh. Jobs sharing a GPU name the same
--device file prefix; each keeps its own heartbeat file <prefix>.<pid>
fresh while it runs (a suspended job is stopped, so its heartbeat ages).

Prints `done: N steps` at the end, like the examples.
"""

import argparse
import glob
import os
import sys
import time

import gandiva


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--device", required=True, help="heartbeat file prefix")
    ap.add_argument("--step-ms", type=float, default=10)
    ap.add_argument("--slowdown", type=float, default=3)
    args = ap.parse_args()
    gandiva.init()
    mine = f"{args.device}.{os.getpid()}"
    print(f"contending job on {args.device}", flush=True)
    while gandiva.minibatches() < args.steps:
        now = time.time()
        with open(mine, "w"):
            pass
        others = 0
        for path in glob.glob(args.device + ".*"):
            if path == mine:
                continue
            try:
                if now - os.stat(path).st_mtime < 0.1:
                    others += 1
            except FileNotFoundError:
                pass
        factor = args.slowdown if others else 1.0
        time.sleep(args.step_ms / 1000 * factor)
        gandiva.step()
    os.unlink(mine)
    print(f"done: {gandiva.minibatches()} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
