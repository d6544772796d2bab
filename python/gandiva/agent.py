"""Agent-side helpers over libgandiva_client.so: create a job's progress page,
read it, post requests. For tools and tests; the node agent itself uses the
C++ ProgressReader (src/client/progress_reader.h). Requires the shared
library even outside gandiva.

Thread-safety: every call maps the page on its own; only one agent may post
requests to a page.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Optional

from gandiva import _lib
from gandiva._lib import GandivaError

# enum gandiva_job_state
STATE_NEW = 0
STATE_RUNNING = 1
STATE_SUSPENDING = 2
STATE_SUSPENDED = 3
STATE_RESUMING = 4
STATE_CHECKPOINTING = 5
STATE_EXITED = 6
STATE_WAITING = 7  # warm start: waiting for the checkpoint (page minor 1)
STATE_NAMES = ["new", "running", "suspending", "suspended", "resuming",
               "checkpointing", "exited", "waiting"]

# enum gandiva_request_kind
REQUEST_NONE = 0
REQUEST_SUSPEND = 1
REQUEST_CHECKPOINT_EXIT = 2
REQUEST_RESIZE = 3


@dataclasses.dataclass(frozen=True)
class Page:
    """One read of a progress page (times: CLOCK_MONOTONIC ns, 0 = never)."""

    version: tuple
    pid: int
    state: int
    minibatches: int
    last_boundary_ns: int
    rate: Optional[float]  # mini-batches/s over the window, None if unknown
    rate_window: int
    request_seq: int
    ack_seq: int
    done_seq: int
    last_kind: int
    last_result: int
    last_received_ns: int
    last_effective_ns: int
    served_count: int
    suspend_count: int
    resumed_ns: int
    exit_code: int
    target_world_size: int
    restore_begin_ns: int = 0  # restore began (after a warm start's wait)
    restore_end_ns: int = 0    # ... and finished

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state] if self.state < len(STATE_NAMES) \
            else str(self.state)

    @property
    def last_latency_ns(self) -> Optional[int]:
        """Request-to-effect latency of the last finished request."""
        if (self.served_count == 0 or self.last_received_ns == 0 or
                self.last_effective_ns < self.last_received_ns):
            return None
        return self.last_effective_ns - self.last_received_ns


def create_page(path: str) -> None:
    """Creates (or truncates) an empty page file at `path` (mode 0600)."""
    rc = _lib.load_real().gandiva_page_create(str(path).encode())
    if rc != 0:
        raise GandivaError(f"gandiva_page_create({path})", rc)


def read_metric(path: str):
    """The job's last reported metric as (value, minibatches), or None when
    it reported none."""
    value = ctypes.c_double()
    at = ctypes.c_uint64()
    reports = ctypes.c_uint64()
    rc = _lib.load_real().gandiva_page_read_metric(
        str(path).encode(), ctypes.byref(value), ctypes.byref(at),
        ctypes.byref(reports))
    if rc != 0:
        raise GandivaError(f"gandiva_page_read_metric({path})", rc)
    return (value.value, at.value) if reports.value > 0 else None


def read_page(path: str) -> Page:
    info = _lib.PageInfo()
    rc = _lib.load_real().gandiva_page_read(str(path).encode(), info)
    if rc != 0:
        raise GandivaError(f"gandiva_page_read({path})", rc)
    return Page(
        version=(info.version_major, info.version_minor), pid=info.pid,
        state=info.state, minibatches=info.minibatches,
        last_boundary_ns=info.last_boundary_ns,
        rate=info.rate if info.rate_window >= 2 else None,
        rate_window=info.rate_window, request_seq=info.request_seq,
        ack_seq=info.ack_seq, done_seq=info.done_seq,
        last_kind=info.last_kind, last_result=info.last_result,
        last_received_ns=info.last_received_ns,
        last_effective_ns=info.last_effective_ns,
        served_count=info.served_count, suspend_count=info.suspend_count,
        resumed_ns=info.resumed_ns, exit_code=info.exit_code,
        target_world_size=info.target_world_size,
        restore_begin_ns=info.restore_begin_ns,
        restore_end_ns=info.restore_end_ns)


def request(path: str, kind: int, arg: int = 0) -> int:
    """Posts a request (REQUEST_*); returns its sequence number."""
    seq = _lib.load_real().gandiva_page_request(str(path).encode(), kind, arg)
    if seq < 0:
        raise GandivaError(f"gandiva_page_request({path})", int(seq))
    return int(seq)


def mark_ready(directory: str) -> None:
    """Warm start: tells a job waiting on `directory` (its
    GANDIVA_RESUME_FROM) that the checkpoint is complete, by creating the
    ready file there (atomically: temp file, then rename)."""
    import os
    tmp = os.path.join(str(directory), f".gandiva-ready.tmp.{os.getpid()}")
    open(tmp, "w").close()
    os.replace(tmp, os.path.join(str(directory), _lib.RESUME_READY_FILE))


def offer_stream(directory: str, host: str, port: int, token: bytes,
                 path: str, size: int, slices=None) -> None:
    """Warm start straight from the source: tells the job waiting on
    `directory` to take its checkpoint file `path` (`size` bytes) from the
    bulk channel at host:port with `token`, by writing the offer file
    (atomically). slices: [(offset, length)] per parallel stream (default:
    one stream, the whole file). Call mark_ready() after it."""
    import os
    slices = slices or [(0, int(size))]
    text = (f"host {host}\nport {int(port)}\ntoken {token.hex()}\n"
            f"path {path}\nsize {int(size)}\nstreams {len(slices)}\n"
            + "".join(f"slice {int(a)} {int(n)}\n" for a, n in slices))
    tmp = os.path.join(str(directory), f".gandiva-stream.tmp.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(str(directory), _lib.STREAM_OFFER_FILE))


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC now (the clock of every page timestamp)."""
    return _lib.time_monotonic_ns()
