#!/usr/bin/env python3
"""A small LSTM language model trained on synthetic tokens, as a gandiva job.

The "language" is a fixed random Markov chain over a small vocabulary (each
token has a few likely successors), so the loss falls from log(vocab)
towards the chain's entropy. Each mini-batch ends at a gandiva boundary
(gandiva.torch.Job): the agent can suspend the job there or make it
checkpoint and exit; outside gandiva the gandiva calls are no-ops.

Exits 0 after exactly --steps mini-batches; the last line is
"done: <steps> steps".

    /usr/bin/python3 examples/train_lstm.py --steps 50
"""

import argparse
import math
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


class LstmLm(nn.Module):
    """Embedding, one LSTM layer, and a projection back to the vocabulary."""

    def __init__(self, vocab: int, embed: int = 32, hidden: int = 48):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.out(h)


def synthetic_corpus(vocab: int, seq_len: int, sequences: int):
    """(input, target) pairs of token windows drawn from a fixed Markov chain
    in which every token has 3 likely successors (same data in every run)."""
    g = torch.Generator().manual_seed(1808)
    logits = torch.full((vocab, vocab), -4.0)
    for t in range(vocab):
        nxt = torch.randperm(vocab, generator=g)[:3]
        logits[t, nxt] = torch.tensor([2.0, 1.0, 0.5])
    probs = logits.softmax(dim=1)
    stream = torch.empty(sequences * (seq_len + 1), dtype=torch.long)
    stream[0] = 0
    for i in range(1, stream.numel()):
        stream[i] = torch.multinomial(probs[stream[i - 1]], 1, generator=g)
    windows = stream.view(sequences, seq_len + 1)
    return torch.utils.data.TensorDataset(windows[:, :-1].clone(),
                                          windows[:, 1:].clone())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200,
                    help="mini-batches to train (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--log-every", type=int, default=20,
                    help="print progress every N mini-batches")
    ap.add_argument("--min-step-ms", type=float, default=0,
                    help="pad each mini-batch to at least this long")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads for torch (virtual GPUs share CPUs)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = torch.utils.data.DataLoader(
        synthetic_corpus(args.vocab, args.seq_len, 256),
        batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = LstmLm(args.vocab).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    job = gandiva.torch.Job(model, optimizer)
    if job.start():
        print(f"resumed from {job.restored_from} at step {job.steps}",
              flush=True)
    print(f"lstm: job {gandiva.job_id() or '-'} on {device} "
          f"(GANDIVA_VIRTUAL_GPUS={os.environ.get('GANDIVA_VIRTUAL_GPUS', '-')}"
          f"), gandiva {'attached' if gandiva.active() else 'not attached'}, "
          f"{args.steps} steps; uniform loss would be "
          f"{math.log(args.vocab):.3f}", flush=True)

    t0, first = time.monotonic(), job.steps
    loss = torch.tensor(0.0)
    for epoch in job.epochs(10**9):
        for x, y in job.batches(loader, max_steps=args.steps):
            started = time.monotonic()
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, args.vocab),
                                   y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step = job.steps + 1  # job.steps counts at the boundary
            if step % args.log_every == 0 or step == args.steps:
                job.report(loss.item())  # gandiva ls/show: METRIC
                rate = (step - first) / max(time.monotonic() - t0, 1e-9)
                print(f"epoch {epoch} step {step}/{args.steps} "
                      f"loss {loss.item():.4f} ({rate:.1f} steps/s)",
                      flush=True)
            pad = args.min_step_ms / 1000 - (time.monotonic() - started)
            if pad > 0:
                time.sleep(pad)
        if job.steps >= args.steps:
            break
    print(f"done: {job.steps} steps, loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
