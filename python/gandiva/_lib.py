"""Loading libgandiva_client.so and calling it through ctypes.

Where the library is looked for, in order:
  1. the file named by GANDIVA_CLIENT_LIB;
  2. libgandiva_client.so next to this package (python/gandiva/);
  3. <repo>/build/lib/libgandiva_client.so (the default CMake build dir).
Without GANDIVA_PROGRESS_FILE (the job is not run by a gandiva agent) and
without the library, a pure-Python no-op stands in for it: steps are counted,
the environment is read, and nothing else happens. With GANDIVA_PROGRESS_FILE
set, a missing library is an error (LibraryNotFoundError).

Thread-safety: load() is guarded by a lock; the returned object follows the C
library's rules (step() from the training thread only).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Callable, List, Optional

LIB_NAME = "libgandiva_client.so"

# Result codes (client/gandiva_client.h).
OK = 0
INACTIVE = 1
E_IO = -1
E_BAD_PAGE = -2
E_SIGNAL = -3
E_HOOK = -4
E_NO_CHECKPOINT_DIR = -5
E_STATE = -6
E_INVALID = -7

STEP_CONTINUE = 0
STEP_RESUMED = 1
STEP_CHECKPOINT = 2
STEP_COUNT_ONLY = 1  # gandiva_step_flags() flag

EXIT_MIGRATE = 75
EXIT_RESIZE = 76

# Warm start: created by the agent in GANDIVA_RESUME_FROM once the checkpoint
# is complete (client/progress_page.h).
RESUME_READY_FILE = ".gandiva-ready"
# Warm start straight from the source (client/progress_page.h): the job
# writes STREAM_OK_FILE in GANDIVA_RESUME_FROM before it waits, naming the
# checkpoint file it can take from a socket; the agent may then write
# STREAM_OFFER_FILE there (before the ready file) instead of the checkpoint.
STREAM_OK_FILE = ".gandiva-stream-ok"
STREAM_OFFER_FILE = ".gandiva-stream"
# Written by the job once the stream's last byte came: "received_ns N".
STREAM_DONE_FILE = ".gandiva-stream-done"
# Periodic checkpoints (client/progress_page.h): after each save the job
# writes this note beside it: "minibatches N", "path NAME", "mtime_ns M".
SAVED_FILE = ".gandiva-saved"
# The bulk channel's answer to the right token (runtime/agent/bulk_transfer.h).
BULK_ACCEPTED = b"GNDVBLK1"

_ERROR_NAMES = {
    OK: "GANDIVA_OK",
    INACTIVE: "GANDIVA_INACTIVE",
    E_IO: "GANDIVA_E_IO",
    E_BAD_PAGE: "GANDIVA_E_BAD_PAGE",
    E_SIGNAL: "GANDIVA_E_SIGNAL",
    E_HOOK: "GANDIVA_E_HOOK",
    E_NO_CHECKPOINT_DIR: "GANDIVA_E_NO_CHECKPOINT_DIR",
    E_STATE: "GANDIVA_E_STATE",
    E_INVALID: "GANDIVA_E_INVALID",
}


class GandivaError(RuntimeError):
    """A gandiva C call failed; `code` is the GANDIVA_E_* value."""

    def __init__(self, what: str, code: int):
        super().__init__(f"{what}: {_ERROR_NAMES.get(code, code)}")
        self.code = code


class LibraryNotFoundError(ImportError):
    """libgandiva_client.so was needed (GANDIVA_PROGRESS_FILE is set) but not
    found; the message lists every place that was tried."""


HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
CKPT_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class PageInfo(ctypes.Structure):
    """gandiva_page_info (client/gandiva_client.h)."""

    _fields_ = [
        ("version_major", ctypes.c_uint32),
        ("version_minor", ctypes.c_uint32),
        ("pid", ctypes.c_int32),
        ("state", ctypes.c_uint32),
        ("minibatches", ctypes.c_uint64),
        ("last_boundary_ns", ctypes.c_uint64),
        ("rate", ctypes.c_double),
        ("rate_window", ctypes.c_uint32),
        ("request_seq", ctypes.c_uint32),
        ("ack_seq", ctypes.c_uint32),
        ("done_seq", ctypes.c_uint32),
        ("last_kind", ctypes.c_uint32),
        ("last_result", ctypes.c_int32),
        ("last_received_ns", ctypes.c_uint64),
        ("last_effective_ns", ctypes.c_uint64),
        ("served_count", ctypes.c_uint64),
        ("suspend_count", ctypes.c_uint64),
        ("resumed_ns", ctypes.c_uint64),
        ("exit_code", ctypes.c_int32),
        ("target_world_size", ctypes.c_uint32),
        ("restore_begin_ns", ctypes.c_uint64),
        ("restore_end_ns", ctypes.c_uint64),
    ]


def candidate_paths() -> List[Path]:
    """Where the library is looked for, in order."""
    paths = []
    env = os.environ.get("GANDIVA_CLIENT_LIB")
    if env:
        paths.append(Path(env))
    here = Path(__file__).resolve().parent
    paths.append(here / LIB_NAME)
    paths.append(here.parent.parent / "build" / "lib" / LIB_NAME)
    return paths


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    sigs = {
        "gandiva_init": ([], c.c_int),
        "gandiva_set_hooks": ([HOOK, HOOK, CKPT_HOOK, CKPT_HOOK, c.c_void_p],
                              None),
        "gandiva_restore": ([], c.c_int),
        "gandiva_restore_begin": ([c.c_int], c.c_int),
        "gandiva_restore_end": ([], None),
        "gandiva_step": ([], c.c_int),
        "gandiva_step_flags": ([c.c_uint], c.c_int),
        "gandiva_checkpoint_done": ([c.c_int], c.c_int),
        "gandiva_minibatches": ([], c.c_uint64),
        "gandiva_set_minibatches": ([c.c_uint64], None),
        "gandiva_active": ([], c.c_int),
        "gandiva_report_metric": ([c.c_double], c.c_int),
        "gandiva_job_id": ([], c.c_char_p),
        "gandiva_checkpoint_dir": ([], c.c_char_p),
        "gandiva_resume_from": ([], c.c_char_p),
        "gandiva_target_world_size": ([], c.c_uint32),
        "gandiva_shutdown": ([], None),
        "gandiva_strerror": ([c.c_int], c.c_char_p),
        "gandiva_page_create": ([c.c_char_p], c.c_int),
        "gandiva_page_read": ([c.c_char_p, c.POINTER(PageInfo)], c.c_int),
        "gandiva_page_read_metric": ([c.c_char_p, c.POINTER(c.c_double),
                                      c.POINTER(c.c_uint64),
                                      c.POINTER(c.c_uint64)], c.c_int),
        "gandiva_page_request": ([c.c_char_p, c.c_uint32, c.c_uint32],
                                 c.c_int64),
        "gandiva_monotonic_ns": ([], c.c_uint64),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


class NoOpLib:
    """Stands in for the C library outside gandiva: counts steps only."""

    is_noop = True

    def __init__(self) -> None:
        self._count = 0
        self._env = {}

    def gandiva_init(self) -> int:
        for name in ("GANDIVA_JOB_ID", "GANDIVA_CHECKPOINT_DIR",
                     "GANDIVA_RESUME_FROM"):
            value = os.environ.get(name)
            self._env[name] = value.encode() if value else None
        return INACTIVE

    def gandiva_set_hooks(self, *args) -> None:
        pass

    def gandiva_restore(self) -> int:
        return E_STATE

    def gandiva_restore_begin(self, timeout_ms: int) -> int:
        # The same wait as the C library's (a rank > 0 of a data-parallel
        # job may run without the library).
        resume = self._env.get("GANDIVA_RESUME_FROM")
        if resume is None:
            return 0
        if os.environ.get("GANDIVA_RESUME_WAIT") == "1":
            import time
            ready = os.path.join(resume.decode(), RESUME_READY_FILE)
            deadline = (None if timeout_ms < 0 else
                        time.monotonic() + timeout_ms / 1000.0)
            while not os.path.exists(ready):
                if deadline is not None and time.monotonic() >= deadline:
                    return E_STATE
                time.sleep(0.002)
        return 1

    def gandiva_restore_end(self) -> None:
        pass

    def gandiva_step(self) -> int:
        self._count += 1
        return STEP_CONTINUE

    def gandiva_step_flags(self, flags: int) -> int:
        return self.gandiva_step()

    def gandiva_checkpoint_done(self, result: int) -> int:
        return E_STATE

    def gandiva_minibatches(self) -> int:
        return self._count

    def gandiva_set_minibatches(self, count: int) -> None:
        self._count = int(count)

    def gandiva_active(self) -> int:
        return 0

    def gandiva_report_metric(self, value: float) -> int:
        return E_STATE

    def gandiva_job_id(self) -> Optional[bytes]:
        return self._env.get("GANDIVA_JOB_ID")

    def gandiva_checkpoint_dir(self) -> Optional[bytes]:
        return self._env.get("GANDIVA_CHECKPOINT_DIR")

    def gandiva_resume_from(self) -> Optional[bytes]:
        return self._env.get("GANDIVA_RESUME_FROM")

    def gandiva_target_world_size(self) -> int:
        return 0

    def gandiva_shutdown(self) -> None:
        self._env = {}

    def gandiva_strerror(self, code: int) -> bytes:
        return _ERROR_NAMES.get(code, "GANDIVA_E_UNKNOWN").encode()

    def gandiva_monotonic_ns(self) -> int:
        return time_monotonic_ns()


def time_monotonic_ns() -> int:
    import time
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


_lock = threading.Lock()
_lib = None


def find_library() -> ctypes.CDLL:
    """Loads the C library from the first candidate path that exists, or
    raises LibraryNotFoundError naming every path tried."""
    tried = []
    for path in candidate_paths():
        if path.is_file():
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                tried.append(f"{path} (cannot load: {e})")
                continue
            _declare(lib)
            lib.is_noop = False
            lib.path = str(path)
            return lib
        tried.append(f"{path} (not found)")
    if not os.environ.get("GANDIVA_CLIENT_LIB"):
        tried.insert(0, "$GANDIVA_CLIENT_LIB (unset)")
    raise LibraryNotFoundError(
        f"gandiva: {LIB_NAME} not found; looked in: " + "; ".join(tried) +
        ". Build it (cmake --build <build-dir> --target gandiva_client) and "
        "set GANDIVA_CLIENT_LIB to its path.")


def load():
    """The C library, or the no-op stand-in when it is missing and the job
    runs outside gandiva (no GANDIVA_PROGRESS_FILE)."""
    global _lib
    with _lock:
        if _lib is None:
            try:
                _lib = find_library()
            except LibraryNotFoundError:
                if os.environ.get("GANDIVA_PROGRESS_FILE"):
                    raise
                _lib = NoOpLib()
        return _lib


def load_real() -> ctypes.CDLL:
    """The C library itself (agent-side helpers need it)."""
    lib = load()
    if getattr(lib, "is_noop", False):
        return find_library()
    return lib


def wrap_hook(fn: Optional[Callable[[], None]]):
    """A C hook calling `fn`; exceptions are printed and reported as 1."""
    if fn is None:
        return HOOK()

    def call(_user_data):
        try:
            fn()
            return 0
        except BaseException:  # never unwind through C
            import traceback
            traceback.print_exc()
            return 1

    return HOOK(call)
