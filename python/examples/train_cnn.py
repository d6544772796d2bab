#!/usr/bin/env python3
"""A small CNN trained on synthetic images, ready for gandiva.

Runs anywhere: outside gandiva the gandiva calls are no-ops. Under a gandiva
agent the job can be suspended (SIGTSTP) and resumed (SIGCONT) between two
mini-batches, and migrated: it checkpoints to $GANDIVA_CHECKPOINT_DIR, exits
with status 75, and a restart with GANDIVA_RESUME_FROM continues exactly where
it stopped.

    /usr/bin/python3 python/examples/train_cnn.py --steps 20
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import gandiva.torch
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gandiva.torch


class SmallCnn(nn.Module):
    def __init__(self, classes: int = 4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)   # 16x16 -> 8x8
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)   # 8x8 -> 4x4
        return self.fc(self.drop(x.flatten(1)))


def synthetic_images(n: int, classes: int = 4):
    """Noisy 16x16 images whose class is the quadrant holding a bright blob
    (fixed seed: the data set is the same in every run)."""
    g = torch.Generator().manual_seed(2018)
    labels = torch.randint(0, classes, (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, 16, 16, generator=g)
    for i, c in enumerate(labels.tolist()):
        r, col = (c // 2) * 8, (c % 2) * 8
        images[i, 0, r + 2:r + 6, col + 2:col + 6] += 1.0
    return torch.utils.data.TensorDataset(images, labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="mini-batches")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--log-every", type=int, default=5)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = torch.utils.data.DataLoader(synthetic_images(1024),
                                         batch_size=args.batch_size,
                                         shuffle=True)
    model = SmallCnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    job = gandiva.torch.Job(model, optimizer)
    if job.start():
        print(f"resumed from {job.restored_from} at step {job.steps}",
              flush=True)
    print(f"job {gandiva.job_id() or '-'} on {device}, gandiva "
          f"{'attached' if gandiva.active() else 'not attached (no-op)'}",
          flush=True)

    t0, first = time.monotonic(), job.steps
    for epoch in job.epochs(10**6):
        for images, labels in job.batches(loader, max_steps=args.steps):
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step = job.steps + 1  # job.steps counts at the boundary
            if step % args.log_every == 0 or step == args.steps:
                rate = (step - first) / max(time.monotonic() - t0, 1e-9)
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"({rate:.1f} steps/s)", flush=True)
        if job.steps >= args.steps:
            break
    print(f"done: {job.steps} steps", flush=True)


if __name__ == "__main__":
    main()
