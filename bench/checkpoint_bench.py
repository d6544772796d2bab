"""Times gandiva.torch.Job checkpoints of a large model with Adam state:
the fast raw-tensor format (checkpoint.gdv) against torch.save
(checkpoint.pt), each saved by Job.save() and loaded by Job.load() into a
fresh job, and checks the restore is bit-identical. Then the load as a warm
start does it, each in a fresh process whose model and optimizer exist (a
warmup step made the optimizer state): Job.load, which reads straight into
that memory, against reading into new tensors and copying (median of
--repeat).

    PYTHONPATH=python /usr/bin/python3 bench/checkpoint_bench.py [--dir /dev/shm] [--mb 288]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

try:
    import gandiva.torch
except ImportError:  # run from a checkout: <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import gandiva.torch


def make(width, layers, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        *[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt


def child(mode, path, width, layers):
    """One load in this fresh process; prints its milliseconds."""
    torch.set_num_threads(1)
    model, opt = make(width, layers, 1)
    model(torch.randn(1, width)).pow(2).mean().backward()  # the warmup
    opt.step()
    t0 = time.perf_counter()
    if mode == "in-place":
        gandiva.torch.Job(model, opt).load(path)
    else:  # into new tensors, then copied
        state = gandiva.torch.read_checkpoint(path)
        model.load_state_dict(state["model"])
        gandiva.torch._load_optimizer(opt, state["optimizer"])
    print(f"{1e3 * (time.perf_counter() - t0):.1f}")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--mb", type=float, default=288.0,
                    help="model + Adam state size (3 copies of the params)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers = 6
    width = int(((args.mb * 2**20 / 12) / layers) ** 0.5)
    model, opt = make(width, layers, 0)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    nparams = sum(p.numel() for p in model.parameters())
    total = nparams * 4 * 3
    print(f"model: {layers} x Linear({width}, {width}), {nparams / 1e6:.1f}M "
          f"params; model + Adam state {total / 2**20:.0f} MiB")
    job = gandiva.torch.Job(model, opt)
    model2, opt2 = make(width, layers, 1)
    job2 = gandiva.torch.Job(model2, opt2)
    root = tempfile.mkdtemp(dir=args.dir, prefix="gandiva-bench-")
    try:
        for legacy in (True, False):
            name = "torch.save (old)" if legacy else "raw tensors (new)"
            best_s = best_l = float("inf")
            first = None
            for _ in range(args.repeat):
                d = os.path.join(root, "old" if legacy else "new")
                shutil.rmtree(d, ignore_errors=True)
                t0 = time.perf_counter()
                path = job.save(d, legacy=legacy)
                t1 = time.perf_counter()
                job2.load(path)
                t2 = time.perf_counter()
                best_s, best_l = min(best_s, t1 - t0), min(best_l, t2 - t1)
                first = first or (t1 - t0, t2 - t1)
            size = os.path.getsize(path)
            same = all(torch.equal(a, b) for a, b in zip(
                model.state_dict().values(), model2.state_dict().values()))
            for p, q in zip(model.parameters(), model2.parameters()):
                for k in ("exp_avg", "exp_avg_sq", "step"):
                    same = same and torch.equal(opt.state[p][k],
                                                opt2.state[q][k])
            print(f"{name:18s}: save {best_s:.3f} s, load {best_l:.3f} s, "
                  f"save+load {best_s + best_l:.3f} s; first run: save "
                  f"{first[0]:.3f} s, load {first[1]:.3f} s "
                  f"({size / 2**20:.0f} MiB file, bit-identical: {same})")
            model2, opt2 = make(width, layers, 1)
            job2 = gandiva.torch.Job(model2, opt2)
        # A warm start's load, in fresh processes, the two ways alternating.
        times = {"in-place": [], "copy": []}
        for _ in range(args.repeat):
            for mode in times:
                out = subprocess.run(
                    [sys.executable, __file__, "--child", mode, path,
                     str(width), str(layers)],
                    check=True, capture_output=True, text=True).stdout
                times[mode].append(float(out.strip().splitlines()[-1]))
        med = {m: statistics.median(v) for m, v in times.items()}
        print(f"load in a fresh warm process (median of {args.repeat}): "
              f"into the model and optimizer's memory {med['in-place']:.0f} "
              f"ms, into new tensors then copied {med['copy']:.0f} ms "
              f"(x{med['copy'] / med['in-place']:.2f})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
