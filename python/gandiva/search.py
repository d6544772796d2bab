"""Hyper-parameter search by successive halving on a gandiva cluster.

Every configuration of a grid (or --samples of them drawn at random, from
the grid or from ranges) starts at once as a job of its own; gandiva
time-slices them (and packs them where that pays), so that each reports its
metric early. At each rung (a mini-batch budget) the search ranks the jobs
still in it by the metric they reported at that budget and kills the worst,
keeping the best floor(n * --keep), at least one; the survivors train on to the next rung, and
the last rung's best is the winner. The jobs report their metric through
the job-side library (gandiva.torch.Job.report or gandiva.report_metric).

    python3 -m gandiva.search examples/cnn-search.yaml \\
        --param lr=0.2,0.05,0.01,0.002 --rungs 100,300 --keep 0.5 --mode min
    python3 -m gandiva.search examples/cnn-search.yaml \\
        --param lr=log:0.001:0.3 --samples 8 --seed 1 --rungs 100,300

With --hyperband R, the search runs Hyperband (Li et al., JMLR 2018)
instead: brackets of successive halving one after another, from many
configurations stopped early to few run to R mini-batches, each bracket's
configurations drawn at random, keeping 1/--eta at each rung; the best of
the brackets' survivors wins.

The spec is a job spec (examples/README.md) whose text names the parameters
as {lr}, {batch_size}, ...: each configuration's spec is that text with the
values put in, submitted as NAME-1, NAME-2, ... (a bracket's all at once:
one `gandiva submit`, all or none). A metric counts for a rung
of N mini-batches once the job reported it during its N-th mini-batch or
later (so make the rungs multiples of how often the job reports), or the
job finished with one; a job that fails, is killed by someone else, or
finishes without one leaves the search. The search talks to the
cluster through the gandiva command (--gandiva, else `gandiva` on PATH,
else build/bin/gandiva of this checkout), with its --scheduler and
--state-dir if given. When the search stops early (a refused command, a
timeout, Ctrl-C) it kills the jobs it started that still run. Exit status 0
with a winner, 1 without one (every job failed), 2 on a usage error or a
refused command or a timeout, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

ENDED = {"FINISHED", "FAILED", "KILLED"}


class SearchError(Exception):
    """A usage error or a failed gandiva command, with its message."""


@dataclass
class Trial:
    index: int
    params: Dict[str, str]
    job_id: int = 0
    state: str = "QUEUED"
    minibatches: int = 0
    metric: Optional[float] = None
    metric_at: int = 0  # the mini-batches when it was reported
    rungs: List[Optional[float]] = field(default_factory=list)
    out: str = ""  # why it left the search, or "" while in it

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class Range:
    """A continuous parameter, sampled uniformly (or its log uniformly)."""
    log: bool
    lo: float
    hi: float

    def draw(self, rng: random.Random) -> str:
        if self.log:
            return f"{math.exp(rng.uniform(math.log(self.lo), math.log(self.hi))):.4g}"
        return f"{rng.uniform(self.lo, self.hi):.4g}"


Values = Union[List[str], Range]


def parse_params(specs: Sequence[str]) -> Dict[str, Values]:
    """--param NAME=V1,V2,... (choices) or NAME=log:LO:HI / uniform:LO:HI
    (a range, for --samples) into an ordered dict."""
    params: Dict[str, Values] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name or not name.replace("_", "a").isalnum():
            raise SearchError(f"--param {spec!r}: expected NAME=V1,V2,... or "
                              "NAME=log:LO:HI or NAME=uniform:LO:HI")
        if name in params:
            raise SearchError(f"--param {name}: given twice")
        kind, colon, bounds = values.partition(":")
        if colon and kind in ("log", "uniform"):
            lo_text, _, hi_text = bounds.partition(":")
            try:
                lo, hi = float(lo_text), float(hi_text)
            except ValueError:
                raise SearchError(f"--param {name}: expected {kind}:LO:HI "
                                  f"with numbers, got {values!r}")
            if not lo < hi or (kind == "log" and lo <= 0):
                raise SearchError(f"--param {name}: {kind}:LO:HI needs LO < HI"
                                  + (" and LO > 0" if kind == "log" else ""))
            params[name] = Range(kind == "log", lo, hi)
            continue
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals:
            raise SearchError(f"--param {name}: no values")
        params[name] = vals
    if not params:
        raise SearchError("--param: give at least one (NAME=V1,V2,...)")
    return params


def grid(params: Dict[str, List[str]]) -> List[Dict[str, str]]:
    names = list(params)
    return [dict(zip(names, combo))
            for combo in itertools.product(*(params[n] for n in names))]


def configurations(params: Dict[str, Values], samples: Optional[int] = None,
                   seed: int = 0) -> List[Dict[str, str]]:
    """The whole grid; or, with `samples`, that many drawn at random
    (reproducibly from `seed`): from the grid without repeats when every
    parameter is a list of choices, else each parameter drawn on its own."""
    ranges = [n for n, v in params.items() if isinstance(v, Range)]
    if samples is None:
        if ranges:
            raise SearchError(f"--param {ranges[0]}: a range needs --samples N")
        return grid(params)  # type: ignore[arg-type]
    if samples < 1:
        raise SearchError(f"--samples {samples}: must be at least 1")
    rng = random.Random(seed)
    if not ranges:
        every = grid(params)  # type: ignore[arg-type]
        return rng.sample(every, min(samples, len(every)))
    return [{n: v.draw(rng) if isinstance(v, Range) else rng.choice(v)
             for n, v in params.items()} for _ in range(samples)]


def render(template: str, values: Dict[str, str]) -> str:
    """The spec text with {name} replaced by each value; every parameter
    must appear, and no {name} may stay unknown."""
    text = template
    for name, value in values.items():
        token = "{" + name + "}"
        if token not in template:
            raise SearchError(f"--param {name}: the spec has no {token}")
        text = text.replace(token, value)
    return text


def parse_rungs(text: str) -> List[int]:
    try:
        rungs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SearchError(f"--rungs {text!r}: expected N1,N2,... mini-batches")
    if not rungs or any(r <= 0 for r in rungs) or rungs != sorted(set(rungs)):
        raise SearchError(f"--rungs {text!r}: expected increasing positive "
                          "mini-batch budgets, e.g. 100,300,900")
    return rungs


def hyperband_brackets(max_budget: int, min_budget: int,
                       eta: int) -> List[Tuple[int, List[int]]]:
    """Hyperband's brackets (Li et al., JMLR 2018), most aggressive first:
    for s = s_max .. 0, ceil((s_max + 1) / (s + 1) * eta^s) configurations
    with rungs max_budget * eta^-s, ..., max_budget, keeping 1/eta at each;
    s_max = floor(log_eta(max_budget / min_budget))."""
    if eta < 2:
        raise SearchError(f"--eta {eta}: must be at least 2")
    if not 0 < min_budget <= max_budget:
        raise SearchError(f"--min-budget {min_budget}: must be between 1 and "
                          f"--hyperband ({max_budget})")
    s_max = int(math.floor(math.log(max_budget / min_budget, eta) + 1e-9))
    out = []
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) / (s + 1) * eta ** s)
        rungs = sorted({max(1, round(max_budget * eta ** (i - s)))
                        for i in range(s + 1)})
        out.append((n, rungs))
    return out


class Cluster:
    """The gandiva command, run for each call."""

    def __init__(self, gandiva: str, conn: Sequence[str]):
        self.gandiva = gandiva
        self.conn = list(conn)

    def run(self, *args: str) -> str:
        cmd = [self.gandiva, *args, *self.conn]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SearchError(f"`{' '.join(cmd)}` failed ({p.returncode}): "
                              f"{(p.stderr or p.stdout).strip()}")
        return p.stdout

    def submit(self, spec_paths: Sequence[str]) -> List[int]:
        """Submits the specs in one request, all or none; their ids."""
        out = self.run("submit", *spec_paths)
        ids = [int(w) for w in out.split()]
        if len(ids) != len(spec_paths):
            raise SearchError(f"`gandiva submit` of {len(spec_paths)} specs "
                              f"printed {len(ids)} job ids: {out.strip()!r}")
        return ids

    def jobs(self, name: str, ids: Sequence[int]) -> Dict[int, dict]:
        """The search's jobs (named NAME-N), by id. One the scheduler no
        longer lists (an ended job it archived: gandiva-scheduler
        --keep-ended-jobs) is read with `gandiva show`."""
        pattern = re.sub(r"([*?\[])", r"[\1]", name) + "-*"
        reply = json.loads(
            self.run("ls", "--all", "--json", "--name", pattern) or "{}")
        out = {int(j["id"]): j for j in reply.get("jobs", [])}
        for job_id in ids:
            if job_id not in out:
                out[job_id] = json.loads(self.run("show", str(job_id),
                                                  "--json"))
        return out

    def kill(self, job_id: int) -> None:
        self.run("kill", str(job_id))


def find_gandiva(given: Optional[str]) -> str:
    if given:
        return given
    on_path = shutil.which("gandiva")
    if on_path:
        return on_path
    here = Path(__file__).resolve().parent.parent.parent
    built = here / "build" / "bin" / "gandiva"
    if built.is_file():
        return str(built)
    raise SearchError("no gandiva command: give --gandiva PATH")


def update(trials: Sequence[Trial], jobs: Dict[int, dict]) -> None:
    for t in trials:
        j = jobs.get(t.job_id)
        if j is None:
            continue
        t.state = j.get("state", t.state)
        p = j.get("progress", {})
        t.minibatches = int(p.get("minibatches", 0))
        if int(p.get("metricReports", 0)) > 0:
            t.metric = float(p.get("metric", 0.0))
            t.metric_at = int(p.get("metricMinibatches", 0))


def reached(t: Trial, budget: int) -> bool:
    """Its metric counts for this rung: reported at (or past) the budget,
    or it finished with one."""
    if t.metric is None:
        return False
    # A metric reported during mini-batch k comes with k - 1 boundaries.
    return t.metric_at + 1 >= budget or t.state == "FINISHED"


_TOP_LEVEL_NAME = re.compile(r"^name\s*:.*(\n|$)", re.MULTILINE)


def run_search(cluster: Cluster, template: str,
               configs: List[Dict[str, str]], rungs: List[int], keep: float,
               mode: str, name: str,
               workdir: str, poll_s: float = 1.0, timeout_s: float = 3600,
               log: Callable[[str], None] = print,
               sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> List[Trial]:
    """Runs the search; returns the trials, best first."""
    if not 0 < keep < 1:
        raise SearchError(f"--keep {keep}: must be between 0 and 1")
    if mode not in ("min", "max"):
        raise SearchError(f"--mode {mode!r}: min or max")
    trials = [Trial(i + 1, p) for i, p in enumerate(configs)]
    specs = {t.index: render(template, t.params) for t in trials}
    if not any(line.startswith("workdir:") for line in template.splitlines()):
        # The spec's own directory, as `gandiva submit` would take it.
        specs = {i: s.rstrip("\n") + f"\nworkdir: {workdir}\n"
                 for i, s in specs.items()}
    # Each job's name in place of the spec's own.
    specs = {i: _TOP_LEVEL_NAME.sub("", s).rstrip("\n")
             + f"\nname: {name}-{i}\n" for i, s in specs.items()}
    try:
        with tempfile.TemporaryDirectory(prefix="gandiva-search-") as tmp:
            paths = []
            for t in trials:
                paths.append(os.path.join(tmp, f"{name}-{t.index}.yaml"))
                with open(paths[-1], "w") as f:
                    f.write(specs[t.index])
            # All at once: every configuration starts at the same time.
            for t, job_id in zip(trials, cluster.submit(paths)):
                t.job_id = job_id
                log(f"job {t.job_id}: {name}-{t.index} ({t.label})")
        return _halve(cluster, name, trials, rungs, keep, mode, poll_s,
                      timeout_s, log, sleep, clock)
    except (SearchError, KeyboardInterrupt):
        # The search stops: so do the jobs it started that still run.
        for t in trials:
            if t.job_id and t.state not in ENDED and not t.out:
                try:
                    cluster.kill(t.job_id)
                    log(f"job {t.job_id}: killed (the search stopped)")
                except SearchError as e:
                    log(f"job {t.job_id}: {e}")
        raise


def _halve(cluster: Cluster, name: str, trials: List[Trial],
           rungs: List[int],
           keep: float, mode: str, poll_s: float, timeout_s: float,
           log: Callable[[str], None], sleep: Callable[[float], None],
           clock: Callable[[], float]) -> List[Trial]:
    deadline = clock() + timeout_s
    live = list(trials)
    for r, budget in enumerate(rungs):
        last = r == len(rungs) - 1
        while True:
            # A trial seen ended is final: never read again (its record
            # may be deleted: gandiva-scheduler --keep-archived-for).
            update(trials, cluster.jobs(
                name, [t.job_id for t in trials if t.state not in ENDED]))
            for t in live:
                if t.out or t.state not in ENDED:
                    continue
                if t.state != "FINISHED":
                    # Failed, or killed by someone else: whatever it
                    # reported, it cannot win.
                    t.out = f"{t.state.lower()} at mini-batch {t.minibatches}"
                elif t.metric is None:
                    t.out = "finished without a metric"
            waiting = [t for t in live if not t.out and not reached(t, budget)]
            if not waiting:
                break
            if clock() > deadline:
                raise SearchError(
                    f"rung {budget}: timed out waiting for jobs "
                    f"{', '.join(str(t.job_id) for t in waiting)}")
            sleep(poll_s)
        ranked = [t for t in live if not t.out]
        for t in ranked:
            t.rungs.append(t.metric)
        ranked.sort(key=lambda t: t.metric if mode == "min" else -t.metric)
        n = (len(ranked) if last else
             max(1, math.floor(len(ranked) * keep + 1e-9)))
        log(f"rung {budget} mini-batches: " + ", ".join(
            f"{t.job_id}={t.metric:.4g}" for t in ranked))
        for t in ranked[n:]:
            t.out = f"stopped at rung {budget}"
            if t.state not in ENDED:
                cluster.kill(t.job_id)
            log(f"job {t.job_id} ({t.label}): {t.metric:.4g}, stopped")
        live = ranked[:n]
    # The survivors, ranked at the last rung, train on to their own end.
    return live + [t for t in trials if t not in live]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m gandiva.search",
        description="Hyper-parameter search on a gandiva cluster by "
                    "successive halving or Hyperband (see the module's "
                    "docstring).")
    ap.add_argument("spec", help="job spec with {param} placeholders")
    ap.add_argument("--param", action="append", default=[],
                    metavar="NAME=V1,V2,...",
                    help="a parameter and its values (the grid is every "
                         "combination); or NAME=log:LO:HI or "
                         "NAME=uniform:LO:HI, a range to draw from "
                         "(with --samples)")
    ap.add_argument("--samples", type=int,
                    help="run this many configurations drawn at random "
                         "(from the grid, or the ranges) instead of the grid")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the draws (--samples)")
    budgets = ap.add_mutually_exclusive_group(required=True)
    budgets.add_argument("--rungs", metavar="N1,N2,...",
                         help="mini-batch budgets at which the worst are "
                              "stopped")
    budgets.add_argument("--hyperband", type=int, metavar="R",
                         help="Hyperband instead: brackets of successive "
                              "halving up to R mini-batches, with "
                              "configurations drawn at random (--min-budget, "
                              "--eta)")
    ap.add_argument("--min-budget", type=int,
                    help="Hyperband's smallest rung (default R / eta^2)")
    ap.add_argument("--eta", type=int, default=3,
                    help="Hyperband keeps 1/eta at each rung (3)")
    ap.add_argument("--keep", type=float, default=0.5,
                    help="fraction kept at each rung but the last: the best "
                         "floor(n * keep), at least one (0.5)")
    ap.add_argument("--mode", default="min", choices=["min", "max"],
                    help="whether a lower (loss) or higher metric is better")
    ap.add_argument("--name", help="job name prefix (default: the spec's "
                                   "file name)")
    ap.add_argument("--poll-s", type=float, default=1.0)
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--json", metavar="FILE",
                    help="write every trial's parameters and metrics here")
    ap.add_argument("--gandiva", help="the gandiva command")
    ap.add_argument("--scheduler", help="passed on to gandiva")
    ap.add_argument("--state-dir", help="passed on to gandiva")
    args = ap.parse_args(argv)
    try:
        params = parse_params(args.param)
        if args.hyperband is not None:
            if args.samples is not None:
                raise SearchError("--samples: Hyperband sets each bracket's "
                                  "number of configurations")
            min_budget = args.min_budget or max(
                1, args.hyperband // (args.eta * args.eta))
            # (configurations, rungs, keep) of each bracket, run in turn.
            plan = [(configurations(params, n, args.seed + i), rungs,
                     1.0 / args.eta)
                    for i, (n, rungs) in enumerate(hyperband_brackets(
                        args.hyperband, min_budget, args.eta))]
        else:
            if args.min_budget is not None:
                raise SearchError("--min-budget: only with --hyperband")
            plan = [(configurations(params, args.samples, args.seed),
                     parse_rungs(args.rungs), args.keep)]
        try:
            template = Path(args.spec).read_text()
        except OSError as e:
            raise SearchError(f"spec {args.spec}: {e.strerror}")
        conn = []
        if args.scheduler:
            conn += ["--scheduler", args.scheduler]
        if args.state_dir:
            conn += ["--state-dir", args.state_dir]
        cluster = Cluster(find_gandiva(args.gandiva), conn)
        name = args.name or Path(args.spec).stem
        workdir = str(Path(args.spec).resolve().parent)
        trials: List[Trial] = []
        for b, (configs, rungs, keep) in enumerate(plan):
            prefix = name
            if len(plan) > 1:
                prefix = f"{name}-b{b + 1}"
                print(f"bracket {b + 1} of {len(plan)}: {len(configs)} "
                      f"configurations, rungs {','.join(map(str, rungs))}")
            trials += run_search(cluster, template, configs, rungs, keep,
                                 args.mode, prefix, workdir, args.poll_s,
                                 args.timeout_s)
    except SearchError as e:
        print(f"gandiva.search: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gandiva.search: interrupted; the jobs it started are killed",
              file=sys.stderr)
        return 130
    # Each bracket's survivors reached the same last rung: the best of them
    # wins.
    trials.sort(key=lambda t: (bool(t.out) or t.metric is None,
                               0 if t.metric is None else
                               t.metric if args.mode == "min" else -t.metric))
    best = trials[0] if trials and not trials[0].out else None
    print()
    print(f"{'JOB':>5}  {'METRIC':>10}  {'RUNGS':<24}  PARAMS")
    for t in trials:
        rungs_text = " ".join("-" if m is None else f"{m:.4g}"
                              for m in t.rungs)
        metric = "-" if t.metric is None else f"{t.metric:.4g}"
        print(f"{t.job_id:>5}  {metric:>10}  {rungs_text:<24}  {t.label}"
              + (f"  ({t.out})" if t.out else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"job": t.job_id, "params": t.params,
                        "metric": t.metric, "rungs": t.rungs,
                        "out": t.out or None} for t in trials], f, indent=1)
    if best is None:
        print("no winner: every job failed or was stopped")
        return 1
    print(f"best: job {best.job_id} ({best.label}), metric {best.metric:.4g}"
          " (it trains on to the end of its own run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
