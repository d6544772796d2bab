"""Starts a data-parallel job: N ranks of a script on this machine.

    /usr/bin/python3 -m gandiva.launch [--nproc N] -- script.py args...

N defaults to GANDIVA_WORLD_SIZE (the agent sets it to the job's number of
GPUs; 1 if unset). Each rank gets MASTER_ADDR=127.0.0.1, a free MASTER_PORT,
RANK, LOCAL_RANK, WORLD_SIZE (and GANDIVA_WORLD_SIZE) = N. Only rank 0 keeps
GANDIVA_PROGRESS_FILE: it is the process the agent talks to (its pid is on
the page); gandiva.torch.Job relays the agent's requests to the other ranks.
With CUDA_VISIBLE_DEVICES set (non-empty), rank r sees only the r-th device
listed.

A job whose GPUs span servers runs one launcher per server (a part), which
the agents configure through the environment: GANDIVA_NNODES (parts, > 1),
GANDIVA_NODE_RANK (this part; 0, the lead, holds rank 0),
GANDIVA_LOCAL_WORLD_SIZE (ranks here; N defaults to it),
GANDIVA_RANK_OFFSET (the global rank of this part's first rank),
GANDIVA_WORLD_SIZE (ranks over all parts) and GANDIVA_MASTER_ADDR /
GANDIVA_MASTER_PORT (the lead's host and the port all ranks meet at). The
local rank r is then global rank GANDIVA_RANK_OFFSET + r.

The ranks stay in the launcher's process group (the agent stops and continues
the group). SIGTERM and SIGINT are forwarded to the ranks; SIGTSTP is not
caught (the agent suspends through rank 0 and SIGSTOPs the group). The
launcher exits with its first rank's status when every rank ended with it (0,
or 75 / 76 after a checkpoint-and-exit / resize); otherwise with the first
failure's status (128 + signal for a rank killed by a signal), after killing
the ranks still running. Ranks still running 30 s after the first ended with
0/75/76 are killed (the first rank's status is kept).
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


class Layout:
    """Where this launcher's ranks sit in the job."""

    def __init__(self, nproc: int, world: int, offset: int, addr: str,
                 port: int, nodes: int = 1, node_rank: int = 0):
        self.nproc, self.world, self.offset = nproc, world, offset
        self.addr, self.port = addr, port
        self.nodes, self.node_rank = nodes, node_rank


def _env_int(env: Dict[str, str], name: str) -> int:
    text = env.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: not an integer") from None


def layout_from_env(env: Dict[str, str], nproc: Optional[int]) -> Layout:
    """The ranks to start: a part of a multi-server job when GANDIVA_NNODES
    is over 1, else all of them here. ValueError names a bad variable."""
    nodes = _env_int(env, "GANDIVA_NNODES") if env.get("GANDIVA_NNODES") \
        else 1
    if nodes <= 1:
        n = nproc if nproc is not None else int(
            env.get("GANDIVA_WORLD_SIZE") or 1)
        if n < 1:
            raise ValueError("--nproc must be >= 1")
        return Layout(n, n, 0, "127.0.0.1", free_port())
    node_rank = _env_int(env, "GANDIVA_NODE_RANK")
    world = _env_int(env, "GANDIVA_WORLD_SIZE")
    offset = _env_int(env, "GANDIVA_RANK_OFFSET")
    port = _env_int(env, "GANDIVA_MASTER_PORT")
    n = nproc if nproc is not None else _env_int(env,
                                                 "GANDIVA_LOCAL_WORLD_SIZE")
    addr = env.get("GANDIVA_MASTER_ADDR", "")
    if not 0 <= node_rank < nodes:
        raise ValueError(f"GANDIVA_NODE_RANK={node_rank}: not in 0..{nodes - 1}")
    if n < 1 or offset < 0 or offset + n > world:
        raise ValueError(f"ranks {offset}..{offset + n - 1} (GANDIVA_RANK_OFFSET"
                         f", GANDIVA_LOCAL_WORLD_SIZE) outside "
                         f"GANDIVA_WORLD_SIZE={world}")
    if (node_rank == 0) != (offset == 0):
        raise ValueError(f"GANDIVA_RANK_OFFSET={offset} with GANDIVA_NODE_RANK"
                         f"={node_rank}: the lead part, and it alone, holds "
                         "rank 0")
    if not addr:
        raise ValueError("GANDIVA_MASTER_ADDR: empty")
    if not 0 < port < 65536:
        raise ValueError(f"GANDIVA_MASTER_PORT={port}: not a port")
    return Layout(n, world, offset, addr, port, nodes, node_rank)


def rank_env(base: Dict[str, str], local: int, lay: Layout,
             devices: Optional[List[str]]) -> Dict[str, str]:
    rank = lay.offset + local
    env = dict(base)
    env.update(MASTER_ADDR=lay.addr, MASTER_PORT=str(lay.port),
               RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(lay.world),
               LOCAL_WORLD_SIZE=str(lay.nproc),
               GANDIVA_WORLD_SIZE=str(lay.world), GANDIVA_RANK=str(rank))
    if rank != 0:
        env.pop("GANDIVA_PROGRESS_FILE", None)
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices[local]
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
    try:
        lay = layout_from_env(os.environ, args.nproc)
    except ValueError as e:
        print(f"gandiva.launch: {e}", file=sys.stderr)
        return 2
    nproc = lay.nproc
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
    if lay.nodes > 1:
        print(f"gandiva.launch: part {lay.node_rank} of {lay.nodes}: ranks "
              f"{lay.offset}..{lay.offset + nproc - 1} of {lay.world}, "
              f"meeting at {lay.addr}:{lay.port}", file=sys.stderr, flush=True)
    for local in range(nproc):
        procs.append(subprocess.Popen(
            argv0, env=rank_env(os.environ, local, lay, devices)))

    statuses: Dict[int, int] = {}
    failure: Optional[int] = None
    rank0_done: Optional[float] = None
    while len(statuses) < nproc:
        if 0 in statuses and rank0_done is None:
            rank0_done = time.monotonic()
        if (rank0_done is not None and
                time.monotonic() - rank0_done > _FOLLOW_GRACE_S):
            print("gandiva.launch: ranks still running long after the "
                  "first ended; killing them", file=sys.stderr)
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
