"""PyTorch integration: a training loop that gandiva can suspend, resume,
migrate and resize at mini-batch boundaries.

    import gandiva.torch
    job = gandiva.torch.Job(model, optimizer)
    for epoch in job.epochs(10):               # resumes at the saved epoch
        for batch in job.batches(loader):      # step() at each boundary
            ...train on batch...

What happens at a boundary (after the body of the loop ran for a batch):
  - suspend (SIGTSTP or a page request): model and optimizer tensors move to
    host memory and the CUDA cache is freed; the process stops; on SIGCONT
    they move back and training goes on. On CPU nothing moves.
  - checkpoint-and-exit (migration) or resize: model and optimizer
    state_dicts, the step count, the data position and the RNG states
    (torch, CUDA, numpy, python `random`) are saved to
    $GANDIVA_CHECKPOINT_DIR/checkpoint.pt (temp file + rename), then the
    process exits with status 75 (resize: 76) by raising SystemExit.
A job started with GANDIVA_RESUME_FROM (a directory holding checkpoint.pt, or
the file itself) loads it before the first batch and continues at the next
mini-batch with identical parameters and random streams: `batches()`
re-creates the epoch's iterator from the RNG state the epoch started with
and skips the batches already trained on, so shuffling and random
augmentation replay exactly (for loaders whose randomness comes from these
RNGs).

Extra state (LR schedulers, AMP grad scalers, counters) joins checkpoints via
`register_state()`. Leaving a `batches()` loop early (break or an exception)
counts the current batch as trained. Single-process jobs only: data-parallel
jobs (one checkpoint per replica group) are not handled yet.

Thread-safety: use a Job from the training thread only.
"""

from __future__ import annotations

import os
import random
import sys
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

import torch

import gandiva

CHECKPOINT_NAME = "checkpoint.pt"
_FORMAT = 1


def _rng_state() -> Dict[str, Any]:
    state: Dict[str, Any] = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
    }
    try:
        import numpy as np
        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np
        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Job:
    """A training job cooperating with gandiva.

    model: the torch.nn.Module; optimizer: its optimizer (or None).
    checkpoint_name: file name of the checkpoint inside the directory.
    Construction attaches to the agent (gandiva.init()); the checkpoint named
    by GANDIVA_RESUME_FROM is loaded when training starts (first epochs(),
    batches() or step() call, or start())."""

    def __init__(self, model: torch.nn.Module,
                 optimizer: Optional[torch.optim.Optimizer] = None, *,
                 checkpoint_name: str = CHECKPOINT_NAME):
        self.model = model
        self.optimizer = optimizer
        self.checkpoint_name = checkpoint_name
        self.steps = 0            # mini-batches trained, across restarts
        self.epoch = 0            # epochs completed
        self.batch_in_epoch = 0   # batches trained in the current epoch
        self.restored_from: Optional[str] = None
        self._extra: Dict[str, Tuple[Callable[[], Any],
                                     Callable[[Any], None]]] = {}
        self._started = False
        self._epoch_start_rng: Optional[Dict[str, Any]] = None
        self._resume: Optional[Dict[str, Any]] = None
        self._live: Optional[Tuple[Any, Iterator[Any]]] = None
        self._offloaded: list = []
        gandiva.init()
        gandiva.set_hooks(offload=self.offload, reload=self.reload)

    # ---- user extensions ----

    def register_state(self, name: str, obj: Any = None, *,
                       get: Optional[Callable[[], Any]] = None,
                       set: Optional[Callable[[Any], None]] = None) -> None:
        """Adds state to checkpoints: an object with state_dict() and
        load_state_dict() (an LR scheduler, a GradScaler...), or a get/set
        pair of callables. Register before training starts."""
        if self._started:
            raise RuntimeError("register_state() after training started: "
                               "the checkpoint was already restored")
        if obj is not None:
            get, set = obj.state_dict, obj.load_state_dict
        if get is None or set is None:
            raise ValueError("register_state needs obj or both get and set")
        self._extra[name] = (get, set)

    # ---- the loop ----

    def start(self) -> bool:
        """Loads GANDIVA_RESUME_FROM if set (once). Returns True if it did."""
        if self._started:
            return self.restored_from is not None
        self._started = True
        path = gandiva.resume_from()
        if path:
            self.load(path)
            gandiva.set_minibatches(self.steps)
            return True
        return False

    def epochs(self, count: int) -> Iterator[int]:
        """Yields epoch numbers from the restored epoch up to count - 1. An
        epoch ends when a batches() loop inside it exhausts its loader."""
        self.start()
        while self.epoch < count:
            e = self.epoch
            yield e
            if self.epoch == e:  # the body did not run batches() to the end
                self.epoch += 1
                self.batch_in_epoch = 0

    def batches(self, loader: Iterable,
                max_steps: Optional[int] = None) -> Iterator[Any]:
        """Yields the batches of one epoch of `loader`; after the body of the
        loop ran for a batch (a mini-batch boundary) it counts the step and
        serves gandiva's requests. Stops early once `self.steps` reaches
        max_steps (then the epoch is not complete, and the next batches()
        call on the same loader goes on with it, as a checkpoint would)."""
        self.start()
        if max_steps is not None and self.steps >= max_steps:
            return
        resume, self._resume = self._resume, None
        live, self._live = self._live, None
        if live is not None and live[0] is loader:
            # The last batches() loop over this loader stopped mid-epoch
            # (max_steps or break): go on with the same epoch.
            it = live[1]
        elif resume is not None:
            # Replay the epoch's start: same RNG, same shuffle, then skip
            # what was trained and restore the RNG of the checkpoint.
            self._epoch_start_rng = resume["epoch_start_rng"]
            _set_rng_state(self._epoch_start_rng)
            it = iter(loader)
            for _ in range(resume["batch_in_epoch"]):
                try:
                    next(it)
                except StopIteration:
                    break
            _set_rng_state(resume["rng"])
        else:
            self._epoch_start_rng = _rng_state()
            self.batch_in_epoch = 0
            it = iter(loader)
        for batch in it:
            try:
                yield batch
            except GeneratorExit:
                # The loop was left after training on this batch.
                self._live = (loader, it)
                self._boundary(count_only=True)
                raise
            self._boundary()
            if max_steps is not None and self.steps >= max_steps:
                self._live = (loader, it)
                return
        self.epoch += 1
        self.batch_in_epoch = 0

    def step(self) -> int:
        """For hand-written loops: call after each mini-batch instead of
        using batches() (the data position is then only the step count)."""
        self.start()
        return self._boundary()

    def _boundary(self, count_only: bool = False) -> int:
        self.steps += 1
        self.batch_in_epoch += 1
        rc = gandiva.step(count_only=count_only)
        if rc == gandiva.STEP_CHECKPOINT:
            self._checkpoint_and_exit()
        elif rc < 0:
            warnings.warn(f"gandiva: request failed at step {self.steps}: "
                          f"{gandiva.strerror(rc)}")
        return rc

    def _checkpoint_and_exit(self) -> None:
        directory = gandiva.checkpoint_dir()
        try:
            self.save(directory)
            ok = True
        except Exception:  # the agent learns of it; training goes on
            import traceback
            traceback.print_exc()
            ok = False
        status = gandiva.checkpoint_done(ok)
        if ok:
            sys.stdout.flush()
            sys.stderr.flush()
            raise SystemExit(status)

    # ---- checkpoints ----

    def state_dict(self) -> Dict[str, Any]:
        """Everything a checkpoint holds."""
        return {
            "format": _FORMAT,
            "steps": self.steps,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "model": self.model.state_dict(),
            "optimizer": (self.optimizer.state_dict()
                          if self.optimizer is not None else None),
            "rng": _rng_state(),
            "epoch_start_rng": self._epoch_start_rng,
            "extra": {name: get() for name, (get, _) in self._extra.items()},
        }

    def save(self, directory: str) -> str:
        """Writes the checkpoint into `directory` atomically (temp file, then
        rename); returns its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, self.checkpoint_name)
        tmp = os.path.join(directory,
                           f".{self.checkpoint_name}.tmp.{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                torch.save(self.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def load(self, path: str) -> None:
        """Loads a checkpoint (a file, or a directory holding one)."""
        if os.path.isdir(path):
            path = os.path.join(path, self.checkpoint_name)
        state = torch.load(path, map_location="cpu")
        if state.get("format") != _FORMAT:
            raise ValueError(f"{path}: unknown checkpoint format "
                             f"{state.get('format')}")
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        for name, value in state["extra"].items():
            if name in self._extra:
                self._extra[name][1](value)
            else:
                warnings.warn(f"gandiva: checkpoint state {name!r} is not "
                              "registered; ignored")
        self.steps = state["steps"]
        self.epoch = state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        _set_rng_state(state["rng"])
        self._live = None
        if state["epoch_start_rng"] is not None:
            self._resume = {
                "epoch_start_rng": state["epoch_start_rng"],
                "batch_in_epoch": state["batch_in_epoch"],
                "rng": state["rng"],
            }
        self.restored_from = path

    # ---- suspend hooks (called inside gandiva.step()) ----

    def _device_tensors(self) -> Iterator[Tuple[Any, Any, torch.Tensor]]:
        """(container, key, tensor) for every tensor a suspend moves: model
        parameters, their gradients, buffers and optimizer state."""
        for p in self.model.parameters():
            if p.grad is not None:  # before its parameter changes device
                yield p.grad, "data", p.grad.data
            yield p, "data", p.data
        for b in self.model.buffers():
            yield b, "data", b.data
        if self.optimizer is not None:
            for st in self.optimizer.state.values():
                for k, v in st.items():
                    if torch.is_tensor(v):
                        yield st, k, v

    def offload(self) -> None:
        """Moves device tensors to host memory and frees the CUDA cache."""
        moved = []
        for container, key, t in list(self._device_tensors()):
            if t.device.type == "cpu":
                continue
            host = t.to("cpu")
            if isinstance(container, dict):
                container[key] = host
            else:
                container.data = host
            moved.append((container, key, t.device))
        self._offloaded = moved
        if moved and torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def reload(self) -> None:
        """Moves what offload() moved back to its device."""
        for container, key, device in self._offloaded:
            if isinstance(container, dict):
                container[key] = container[key].to(device)
            else:
                container.data = container.data.to(device)
        self._offloaded = []
