"""Starts a data-parallel job: N ranks of a script on this machine.

    /usr/bin/python3 -m gandiva.launch [--nproc N] -- script.py args...

N defaults to GANDIVA_WORLD_SIZE (the agent sets it to the job's number of
GPUs; 1 if unset). Each rank gets MASTER_ADDR=127.0.0.1, a free MASTER_PORT,
RANK, LOCAL_RANK, WORLD_SIZE (and GANDIVA_WORLD_SIZE) = N. Only rank 0 keeps
GANDIVA_PROGRESS_FILE: it is the process the agent talks to (its pid is on
the page); gandiva.torch.Job relays the agent's requests to the other ranks.
With CUDA_VISIBLE_DEVICES set (non-empty), rank r sees only the r-th device
listed.

The ranks stay in the launcher's process group (the agent stops and continues
the group). SIGTERM and SIGINT are forwarded to the ranks; SIGTSTP is not
caught (the agent suspends through rank 0 and SIGSTOPs the group). The
launcher exits with rank 0's status when every rank ended with it (0, or 75 /
76 after a checkpoint-and-exit / resize); otherwise with the first failure's
status (128 + signal for a rank killed by a signal), after killing the ranks
still running. Ranks still running 30 s after rank 0 ended with 0/75/76 are
killed (rank 0's status is kept).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

# Statuses with which a rank may end while the others are still finishing.
_AGREED = (0, 75, 76)
_KILL_GRACE_S = 10.0
# After rank 0 ended with 0/75/76, how long the others may take to follow
# before they are killed (a rank hung in its process group's teardown).
_FOLLOW_GRACE_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(base: Dict[str, str], rank: int, nproc: int, port: int,
             devices: Optional[List[str]]) -> Dict[str, str]:
    env = dict(base)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
               LOCAL_WORLD_SIZE=str(nproc), GANDIVA_WORLD_SIZE=str(nproc),
               GANDIVA_RANK=str(rank))
    if rank != 0:
        env.pop("GANDIVA_PROGRESS_FILE", None)
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices[rank]
    return env


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gandiva.launch",
        description="start N data-parallel ranks of a training script")
    ap.add_argument("--nproc", type=int, default=None,
                    help="number of ranks (default: $GANDIVA_WORLD_SIZE or 1)")
    ap.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- script.py args... (or a module with -m)")
    args = ap.parse_args(argv)
    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        ap.error("no script given")
    nproc = args.nproc
    if nproc is None:
        nproc = int(os.environ.get("GANDIVA_WORLD_SIZE") or 1)
    if nproc < 1:
        ap.error("--nproc must be >= 1")
    devices = None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        devices = [d.strip() for d in visible.split(",") if d.strip()]
        if len(devices) < nproc:
            print(f"gandiva.launch: {nproc} ranks but only {len(devices)} "
                  f"devices in CUDA_VISIBLE_DEVICES={visible}",
                  file=sys.stderr)
            return 2
    if command[0] != "-m" and not command[0].endswith(".py") and \
            os.access(command[0], os.X_OK) and not os.path.isdir(command[0]):
        argv0 = command  # an executable
    else:
        argv0 = [sys.executable] + command
    port = free_port()
    procs: List[subprocess.Popen] = []

    def forward(signo, _frame):
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signo)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for rank in range(nproc):
        procs.append(subprocess.Popen(
            argv0, env=rank_env(os.environ, rank, nproc, port, devices)))

    statuses: Dict[int, int] = {}
    failure: Optional[int] = None
    rank0_done: Optional[float] = None
    while len(statuses) < nproc:
        if 0 in statuses and rank0_done is None:
            rank0_done = time.monotonic()
        if (rank0_done is not None and
                time.monotonic() - rank0_done > _FOLLOW_GRACE_S):
            print("gandiva.launch: ranks still running long after rank 0 "
                  "ended; killing them", file=sys.stderr)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            return statuses[0]
        for rank, p in enumerate(procs):
            if rank in statuses or p.poll() is None:
                continue
            st = _status(p.returncode)
            statuses[rank] = st
            if failure is None and st not in _AGREED:
                failure = st
        if failure is not None:
            break
        time.sleep(0.01)

    if failure is None:
        first = statuses[0]
        if all(st == first for st in statuses.values()):
            return first
        # Ranks disagree (e.g. one finished, one checkpointed): a failure.
        print(f"gandiva.launch: ranks ended with different statuses "
              f"{[statuses[r] for r in range(nproc)]}", file=sys.stderr)
        return 1

    # A rank failed: end the others (SIGTERM, then SIGKILL).
    forward(signal.SIGTERM, None)
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)  # a stopped rank must see it
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + _KILL_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return failure


if __name__ == "__main__":
    sys.exit(main())
