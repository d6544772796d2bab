"""What moving a job that spans servers costs: a local cluster of --agents
one-GPU agents (virtual GPUs), a data-parallel job (examples/train_ddp.py
through gandiva.launch) on all of them, shrunk to one GPU and grown back
--cycles times with `gandiva resize`. Prints, per direction, the median and
max of each phase from the job's history: the checkpoint (rank 0's save at a
mini-batch boundary and every rank's exit), the transfer to the other
servers, the restart calls, the first mini-batch after the restart, and the
time training was paused (checkpoint request -> first mini-batch).

    /usr/bin/python3 bench/gang_bench.py [--build build] [--agents 2]
        [--cycles 5] [--state-dir DIR]

Asserts nothing; run it on a quiet machine (it prints the load average).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASES = [("checkpoint", r"checkpoint ([\d.]+) ms"),
          ("save", r", save ([\d.]+) ms"),
          ("transfer", r"transfer to \d+ servers?(?: at once, the slowest)? "
                       r"([\d.]+) ms"),
          ("restart", r"restart ([\d.]+) ms"),
          ("first mini-batch", r"first mini-batch ([\d.]+) ms"),
          ("paused", r"training paused ([\d.]+) ms")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--agents", type=int, default=2,
                    help="one-GPU agents, a power of two >= 2")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--state-dir", default=None)
    args = ap.parse_args()
    if args.agents < 2 or args.agents & (args.agents - 1):
        ap.error("--agents must be a power of two >= 2")
    gandiva = Path(args.build) / "bin" / "gandiva"
    state = Path(args.state_dir or tempfile.mkdtemp(prefix="gandiva-gang-"))
    env = dict(os.environ, GANDIVA_STATE_DIR=str(state))

    def g(*argv, check=True):
        r = subprocess.run([str(gandiva), *argv], env=env, text=True,
                           capture_output=True, timeout=600)
        if check and r.returncode != 0:
            raise SystemExit(f"gandiva {' '.join(argv)}: {r.stdout}{r.stderr}")
        return r.stdout

    print(f"load average {os.getloadavg()[0]:.2f}; {args.agents} agents x 1 "
          f"virtual GPU; {args.cycles} shrink/grow cycles")
    g("up", "--agents", str(args.agents), "--gpus-per-agent", "1",
      "--policy", "fifo")
    try:
        spec = state / "ddp.yaml"
        spec.write_text(
            "name: gang-bench\n"
            f"command: {sys.executable} -m gandiva.launch -- "
            f"{REPO}/examples/train_ddp.py --samples 100000000 "
            "--min-step-ms 10 --log-every 0\n"
            f"workdir: {REPO}/examples\n"
            f"gpus: {args.agents}\n"
            "elastic: true\n"
            "env:\n  OMP_NUM_THREADS: \"1\"\n"
            f"  PYTHONPATH: {REPO}/python\n")
        job = g("submit", str(spec)).strip().splitlines()[-1]

        def info():
            return json.loads(g("show", job, "--json"))

        def trains_past(n, timeout=180):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                j = info()
                p = j.get("progress", {})
                if p.get("usesLibrary") and int(p.get("minibatches", 0)) > n:
                    return
                time.sleep(0.2)
            raise SystemExit(f"job {job} did not train past {n}: {j}")

        trains_past(50)
        for _ in range(args.cycles):
            for size in (1, args.agents):
                g("resize", job, "--gpus", str(size))
                mb = int(info().get("progress", {}).get("minibatches", 0))
                trains_past(mb + 20)
        history = info().get("history", [])
    finally:
        g("down", "--purge", check=False)
        if args.state_dir is None:
            shutil.rmtree(state, ignore_errors=True)

    rows = {"shrink": {}, "grow": {}}
    for h in history:
        if h.get("action") not in rows or not h.get("ok"):
            continue
        for name, pattern in PHASES:
            m = re.search(pattern, h.get("detail", ""))
            if m:
                rows[h["action"]].setdefault(name, []).append(float(m.group(1)))
    print(f"{'phase (ms)':<18}{'shrink median':>15}{'max':>10}"
          f"{'grow median':>15}{'max':>10}")
    for name, _ in PHASES:
        cells = []
        for kind in ("shrink", "grow"):
            v = rows[kind].get(name)
            cells += ([f"{statistics.median(v):.1f}", f"{max(v):.1f}"]
                      if v else ["-", "-"])
        print(f"{name:<18}{cells[0]:>15}{cells[1]:>10}{cells[2]:>15}"
              f"{cells[3]:>10}")
    print(f"(shrink: {args.agents} parts -> 1 server; grow: back to "
          f"{args.agents} parts, the checkpoint sent to {args.agents - 1} "
          f"server{'s' if args.agents > 2 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
