"""gandiva: the job side of the gandiva cluster scheduler, for Python.

A training job calls `step()` at every mini-batch boundary; a gandiva node
agent can then suspend it there (SIGTSTP, resumed by SIGCONT), or make it
checkpoint and exit for a migration or a resize. The protocol is described in
src/client/README.md; this package is a thin ctypes layer over
libgandiva_client.so (see gandiva._lib for where it is looked for).

Outside gandiva (no GANDIVA_PROGRESS_FILE) everything is a no-op and works
even without the shared library.

    import gandiva
    gandiva.init()
    for batch in loader:
        train(batch)
        if gandiva.step() == gandiva.STEP_CHECKPOINT:
            save(gandiva.checkpoint_dir())
            raise SystemExit(gandiva.checkpoint_done(True))

PyTorch users get all of this in a few lines from `gandiva.torch.Job`.
Thread-safety: call init/step/checkpoint_done/set_hooks from the training
thread; the getters may be called from any thread.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, Tuple

from gandiva import _lib
from gandiva._lib import (E_BAD_PAGE, E_HOOK, E_INVALID, E_IO,
                          E_NO_CHECKPOINT_DIR, E_SIGNAL, E_STATE, EXIT_MIGRATE,
                          EXIT_RESIZE, INACTIVE, OK, RESUME_READY_FILE,
                          BULK_ACCEPTED, STREAM_DONE_FILE, STREAM_OFFER_FILE,
                          STREAM_OK_FILE, SAVED_FILE,
                          STEP_CHECKPOINT,
                          STEP_CONTINUE, STEP_RESUMED, GandivaError,
                          LibraryNotFoundError)

__all__ = [
    "init", "step", "checkpoint_done", "minibatches", "set_minibatches",
    "active", "job_id", "checkpoint_dir", "resume_from", "target_world_size",
    "restore_begin", "restore_end", "world_size", "RESUME_READY_FILE",
    "STREAM_OK_FILE", "STREAM_OFFER_FILE", "STREAM_DONE_FILE",
    "BULK_ACCEPTED", "SAVED_FILE", "checkpoint_every", "checkpoint_saved",
    "set_hooks", "shutdown", "strerror", "GandivaError",
    "LibraryNotFoundError", "OK", "INACTIVE", "STEP_CONTINUE", "STEP_RESUMED",
    "STEP_CHECKPOINT", "EXIT_MIGRATE", "EXIT_RESIZE", "E_IO", "E_BAD_PAGE",
    "E_SIGNAL", "E_HOOK", "E_NO_CHECKPOINT_DIR", "E_STATE", "E_INVALID",
]

# Keeps the ctypes hook objects alive while C holds pointers to them.
_hooks = ()


def _str(value: Optional[bytes]) -> Optional[str]:
    return value.decode() if value else None


def init() -> int:
    """Attaches to the agent's progress page (GANDIVA_PROGRESS_FILE) and
    installs the SIGTSTP/SIGUSR1 handlers. Returns OK, or INACTIVE outside
    gandiva. Raises LibraryNotFoundError if the page is set but the library
    is missing, GandivaError if attaching failed. Idempotent."""
    rc = _lib.load().gandiva_init()
    if rc < 0:
        raise GandivaError("gandiva_init", rc)
    return rc


def step(count_only: bool = False) -> int:
    """Call at every mini-batch boundary. Returns STEP_CONTINUE, STEP_RESUMED
    (the job was suspended and resumed inside this call), STEP_CHECKPOINT
    (save under checkpoint_dir(), then exit with checkpoint_done(True)), or a
    negative E_* code (a hook failed / no checkpoint dir; training goes on).
    count_only: count the boundary but leave requests for the next step."""
    lib = _lib.load()
    if count_only:
        return lib.gandiva_step_flags(_lib.STEP_COUNT_ONLY)
    return lib.gandiva_step()


def checkpoint_done(ok: bool) -> int:
    """After STEP_CHECKPOINT: report the save. ok=True returns the exit status
    (EXIT_MIGRATE or EXIT_RESIZE) to exit with now; ok=False reports the
    failure to the agent and returns 0 (keep training)."""
    rc = _lib.load().gandiva_checkpoint_done(0 if ok else 1)
    if rc < 0:
        raise GandivaError("gandiva_checkpoint_done", rc)
    return rc


def checkpoint_every() -> Tuple[Optional[int], Optional[float]]:
    """How often the job should save a checkpoint by itself (the spec's
    checkpoint_every): (mini-batches, None), (None, seconds), or (None,
    None) for never. From GANDIVA_CHECKPOINT_EVERY_MINIBATCHES and
    GANDIVA_CHECKPOINT_EVERY_S; a value that does not read as a positive
    number counts as unset."""
    def positive(name, kind):
        try:
            v = kind(os.environ.get(name, ""))
        except ValueError:
            return None
        return v if v > 0 else None
    steps = positive("GANDIVA_CHECKPOINT_EVERY_MINIBATCHES", int)
    if steps is not None:
        return steps, None
    return None, positive("GANDIVA_CHECKPOINT_EVERY_S", float)


def checkpoint_saved(path: str, minibatches: int) -> None:
    """After a periodic save of the checkpoint file `path` (complete, renamed
    into place in checkpoint_dir()) at mini-batch `minibatches`: writes the
    note (SAVED_FILE, temp file then rename) by which the agent keeps that
    checkpoint for the next run if this process fails. Raises OSError when
    the note cannot be written."""
    directory = os.path.dirname(os.path.abspath(path))
    st = os.stat(path)
    note = os.path.join(directory, SAVED_FILE)
    tmp = f"{note}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"minibatches {int(minibatches)}\n"
                f"path {os.path.basename(path)}\n"
                f"mtime_ns {st.st_mtime_ns}\n")
    os.replace(tmp, note)


def minibatches() -> int:
    """Mini-batch boundaries passed so far (after a restore: in total)."""
    return int(_lib.load().gandiva_minibatches())


def set_minibatches(count: int) -> None:
    """Declares the count after a restore, before the first step()."""
    _lib.load().gandiva_set_minibatches(int(count))


def report_metric(value: float) -> bool:
    """Reports the job's metric (a loss, an accuracy: the job's choice); the
    agent shows the last value reported, with the mini-batch count then
    (`gandiva ls`, `gandiva show`), for instance for a hyper-parameter
    search to compare jobs by. False outside gandiva (nothing to report
    to)."""
    return _lib.load().gandiva_report_metric(float(value)) == 0


def active() -> bool:
    """True when attached to a gandiva agent's progress page."""
    return bool(_lib.load().gandiva_active())


def job_id() -> Optional[str]:
    return _str(_lib.load().gandiva_job_id())


def checkpoint_dir() -> Optional[str]:
    """GANDIVA_CHECKPOINT_DIR as read by init()."""
    return _str(_lib.load().gandiva_checkpoint_dir())


def resume_from() -> Optional[str]:
    """GANDIVA_RESUME_FROM as read by init(): a checkpoint to load."""
    return _str(_lib.load().gandiva_resume_from())


def target_world_size() -> int:
    """World size asked by the last resize request (0 if none)."""
    return int(_lib.load().gandiva_target_world_size())


def restore_begin(timeout: Optional[float] = None) -> bool:
    """Starts a restore; call after init(), before the first step(). Returns
    False if there is nothing to load (no GANDIVA_RESUME_FROM). With
    GANDIVA_RESUME_WAIT=1 (a warm start) first waits, in state WAITING, until
    the agent created RESUME_READY_FILE in the resume_from() directory, for
    at most `timeout` seconds (None: forever); raises GandivaError (E_STATE)
    on timeout. Returns True: load resume_from() now, then restore_end().
    A job that wrote STREAM_OK_FILE there (naming the checkpoint file it can
    take from a socket) before the wait may find STREAM_OFFER_FILE instead
    of the files: it then receives the checkpoint from the source itself
    (gandiva.torch does both)."""
    ms = -1 if timeout is None else max(0, int(timeout * 1000))
    rc = _lib.load().gandiva_restore_begin(ms)
    if rc < 0:
        raise GandivaError("gandiva_restore_begin", rc)
    return rc == 1


def restore_end() -> None:
    """After the load that restore_begin() allowed (and set_minibatches()):
    publishes the restore's end time and state RUNNING."""
    _lib.load().gandiva_restore_end()


def world_size() -> int:
    """GANDIVA_WORLD_SIZE: the number of GPUs (data-parallel ranks) the agent
    started the job with; 1 if unset."""
    value = os.environ.get("GANDIVA_WORLD_SIZE")
    return int(value) if value else 1


def set_hooks(offload: Optional[Callable[[], None]] = None,
              reload: Optional[Callable[[], None]] = None) -> None:
    """Registers the suspend hooks: `offload` runs at a suspend before the
    process stops, `reload` after SIGCONT. A hook that raises is reported to
    the agent as a failure (the traceback is printed). Checkpoints are taken
    by the caller on STEP_CHECKPOINT, not by a hook."""
    global _hooks
    lib = _lib.load()
    hooks = (_lib.wrap_hook(offload), _lib.wrap_hook(reload),
             _lib.CKPT_HOOK(), _lib.CKPT_HOOK())
    lib.gandiva_set_hooks(*hooks, None)
    _hooks = hooks


def shutdown() -> None:
    """Publishes that the job left (also done at interpreter exit)."""
    _lib.load().gandiva_shutdown()


def strerror(code: int) -> str:
    return _lib.load().gandiva_strerror(code).decode()


def __getattr__(name: str):
    # `gandiva.torch` without importing torch for users who do not need it.
    if name == "torch":
        import importlib
        return importlib.import_module("gandiva.torch")
    raise AttributeError(f"module 'gandiva' has no attribute {name!r}")
