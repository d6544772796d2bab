#!/usr/bin/env python3
"""A small CNN trained on synthetic images, as a gandiva job.

Each mini-batch ends at a gandiva boundary (gandiva.torch.Job), where the
agent can suspend the job (time-slicing) or make it checkpoint and exit
(migration); a restart with GANDIVA_RESUME_FROM continues at the next
mini-batch. Outside gandiva the gandiva calls are no-ops.

Exits 0 after exactly --steps mini-batches; the last line is
"done: <steps> steps".

    /usr/bin/python3 examples/train_cnn.py --steps 50
"""

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import gandiva.torch
except ImportError:  # run from a checkout: <repo>/python
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import gandiva.torch


class SmallCnn(nn.Module):
    """Two conv layers and a linear classifier for 1x16x16 images."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)  # 16x16 -> 8x8
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)  # 8x8 -> 4x4
        return self.fc(x.flatten(1))


def synthetic_images(n: int, classes: int = 4):
    """Noisy 16x16 images whose class is the quadrant holding a bright
    square (a fixed data set: the same in every run)."""
    g = torch.Generator().manual_seed(2018)
    labels = torch.randint(0, classes, (n,), generator=g)
    images = 1.0 * torch.randn(n, 1, 16, 16, generator=g)
    for i, c in enumerate(labels.tolist()):
        r, col = (c // 2) * 8, (c % 2) * 8
        images[i, 0, r + 2:r + 6, col + 2:col + 6] += 0.6
    return torch.utils.data.TensorDataset(images, labels)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200,
                    help="mini-batches to train (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--log-every", type=int, default=20,
                    help="print progress every N mini-batches")
    ap.add_argument("--min-step-ms", type=float, default=0,
                    help="pad each mini-batch to at least this long (makes a "
                         "tiny job last on a fast machine)")
    ap.add_argument("--log-steps", type=int, default=0,
                    help="also print 'step N at T' (T: wall-clock seconds "
                         "since the epoch) every N mini-batches, to tell "
                         "when each copy of a job trained (default 0: off)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for torch (virtual GPUs share CPUs)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        # Bit-identical runs on a GPU too: a migrated or restored job ends
        # with the same parameters as one that never stopped.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    loader = torch.utils.data.DataLoader(synthetic_images(2048),
                                         batch_size=args.batch_size,
                                         shuffle=True, drop_last=True)
    model = SmallCnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    job = gandiva.torch.Job(model, optimizer)

    def warmup():
        # Run only on a warm start (the destination of a migration), before
        # it waits for the checkpoint: one dummy step readies the kernels,
        # so the first real mini-batch after the load runs at full speed.
        # The checkpoint then replaces whatever this changed.
        images = torch.zeros(args.batch_size, 1, 16, 16, device=device)
        labels = torch.zeros(args.batch_size, dtype=torch.long, device=device)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    if job.start(warmup=warmup):
        print(f"resumed from {job.restored_from} at step {job.steps}",
              flush=True)
    print(f"cnn: job {gandiva.job_id() or '-'} on {device} "
          f"(GANDIVA_VIRTUAL_GPUS={os.environ.get('GANDIVA_VIRTUAL_GPUS', '-')}"
          f"), gandiva {'attached' if gandiva.active() else 'not attached'}, "
          f"{args.steps} steps", flush=True)

    t0, first = time.monotonic(), job.steps
    loss = torch.tensor(0.0)
    for epoch in job.epochs(10**9):
        for images, labels in job.batches(loader, max_steps=args.steps):
            started = time.monotonic()
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step = job.steps + 1  # job.steps counts at the boundary
            if step % args.log_every == 0 or step == args.steps:
                job.report(loss.item())  # gandiva ls/show: METRIC
                rate = (step - first) / max(time.monotonic() - t0, 1e-9)
                print(f"epoch {epoch} step {step}/{args.steps} "
                      f"loss {loss.item():.4f} ({rate:.1f} steps/s)",
                      flush=True)
            if args.log_steps > 0 and step % args.log_steps == 0:
                print(f"step {step} at {time.time():.3f}", flush=True)
            pad = args.min_step_ms / 1000 - (time.monotonic() - started)
            if pad > 0:
                time.sleep(pad)
        if job.steps >= args.steps:
            break
    print(f"done: {job.steps} steps, loss {loss.item():.4f}", flush=True)
    # A fingerprint of the trained parameters: a job that was suspended,
    # migrated or restored prints the same one as a run that never was.
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    print(f"parameters sha256 {digest.hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
