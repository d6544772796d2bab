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
    they move back and training goes on. On CPU nothing moves. A
    checkpoint-and-exit or resize asked while suspended is served right after
    the resume, at the same boundary.
  - checkpoint-and-exit (migration) or resize: model and optimizer
    state_dicts, the step and sample counts, the data position and the RNG
    states (torch, CUDA, numpy, python `random`) are saved to
    $GANDIVA_CHECKPOINT_DIR/checkpoint.gdv (temp file + rename), then the
    process exits with status 75 (resize: 76) by raising SystemExit.
  - periodic checkpoint (the spec's checkpoint_every, given to the process
    as GANDIVA_CHECKPOINT_EVERY_MINIBATCHES or GANDIVA_CHECKPOINT_EVERY_S):
    every that many mini-batches (when `steps` is a multiple of it) or
    once that much time passed since the last save or the start, the same
    checkpoint is saved there and training goes on; then a note
    (gandiva.SAVED_FILE) tells the agent, which keeps that checkpoint for
    the job's next run if the process fails (a crash, an OOM kill). A save
    that fails is warned about, and training goes on. A run that went on
    from a checkpoint (a move's, a resize's) makes it the periodic one as
    it starts: a file received elsewhere is linked there (copied where it
    cannot be), one streamed into memory is saved there.
A job started with GANDIVA_RESUME_FROM (a directory holding the checkpoint,
or the file itself) loads it before the first batch and continues at the
next mini-batch with identical parameters and random streams: `batches()`
re-creates the epoch's iterator from the RNG state the epoch started with
and skips the batches already trained on, so shuffling and random
augmentation replay exactly (for loaders whose randomness comes from these
RNGs).

Warm start: build the model and optimizer, then construct the Job and call
start() (or start training): with GANDIVA_RESUME_WAIT=1 the process does its
slow setup first and then waits (page state WAITING) until the agent says
the checkpoint arrived (gandiva.restore_begin()). A job of one process
first tells the agent it can take its checkpoint straight from the source
(STREAM_OK_FILE); the agent may then offer the source's bulk channel
(STREAM_OFFER_FILE) instead of receiving the files itself, and the job
receives the bytes from the socket straight into its model's and
optimizer's memory (receive()): no file at the destination, no second
copy.

Checkpoint format (`save_state`/`load_state`): one file, "GNDVCKPT" magic, a
small pickled skeleton in which every tensor is a reference (dtype, shape,
offset), then the raw tensor bytes, each 64-byte aligned. Loading reads the
bytes straight into freshly allocated tensors (readinto): no pickling of
tensor data, no extra copies. Files written by torch.save (older gandiva
versions, checkpoint.pt) still load.

Data-parallel jobs (torch.distributed initialized before the Job is built,
world size > 1; see `python -m gandiva.launch`): only rank 0 attaches to the
agent's page. At each boundary rank 0 calls gandiva.step() and broadcasts
the outcome; on checkpoint-and-exit/resize rank 0 saves one replica (plus
every rank's RNG states) and all ranks exit with the same status (75/76),
with os._exit after a barrier rather than SystemExit (so no `finally` or
atexit code of the job runs then: a gloo teardown at exit can abort). A
suspended rank 0 blocks the others in that broadcast. On restore every rank
loads the same checkpoint. `samples` (add_samples() or samples_per_step)
counts the training samples processed, so that a job resized to another
world size can continue at the same sample position.

Starting torch.distributed: `device = gandiva.torch.init_distributed()`
instead of init_process_group. Every rank says whether it has a GPU of its
own (one per rank on its server, none shared with another rank); NCCL is
used if all do, else every rank trains on the CPU over gloo. Ranks that
chose apart (a part on a server without GPUs, two parts given one GPU)
would otherwise wait for each other forever in their first collective.

Extra state (LR schedulers, AMP grad scalers, counters) joins checkpoints via
`register_state()`. Leaving a `batches()` loop early (break or an exception)
counts the current batch as trained.

Thread-safety: use a Job from the training thread only.
"""

from __future__ import annotations

import ctypes
import io
import os
import pickle
import random
import shutil
import struct
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

import gandiva
from gandiva import _lib

CHECKPOINT_NAME = "checkpoint.gdv"
LEGACY_CHECKPOINT_NAME = "checkpoint.pt"  # torch.save files (still loaded)
_FORMAT = 1  # layout of the checkpoint dict

# ---- the fast checkpoint format ----

MAGIC = b"GNDVCKPT"
FILE_VERSION = 1
ALIGN = 64
# magic, file version, reserved, skeleton length, data offset (from file start)
_HEADER = struct.Struct("<8sIIQQ")


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _raw(t: torch.Tensor, nbytes: int):
    """A writable buffer over the bytes of contiguous CPU tensor `t`."""
    return memoryview((ctypes.c_char * nbytes).from_address(t.data_ptr())
                      ).cast("B")


class _Pickler(pickle.Pickler):
    """Pickles the skeleton: dense tensors become (dtype, shape, offset)."""

    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors: List[Tuple[torch.Tensor, int, int]] = []
        self.memo_ids: Dict[int, Tuple] = {}
        self.keep: List[torch.Tensor] = []  # ids stay unique while pickling
        self.size = 0

    def persistent_id(self, obj):
        if not isinstance(obj, torch.Tensor):
            return None
        if obj.layout != torch.strided or obj.is_quantized:
            return None  # rare: pickled by torch itself
        pid = self.memo_ids.get(id(obj))
        if pid is not None:
            return pid
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        offset = self.size
        self.size = _align(offset + nbytes)
        self.tensors.append((t, offset, nbytes))
        self.keep.append(obj)
        pid = ("t", len(self.tensors) - 1, str(t.dtype)[len("torch."):],
               tuple(t.shape), offset, nbytes)
        self.memo_ids[id(obj)] = pid
        return pid


class _Unpickler(pickle.Unpickler):
    def __init__(self, f):
        super().__init__(f)
        self.tensors: List[Tuple[torch.Tensor, int, int]] = []
        self.by_index: Dict[int, torch.Tensor] = {}

    def persistent_load(self, pid):
        if pid[0] != "t":
            raise pickle.UnpicklingError(f"unknown reference {pid[0]!r}")
        _, index, dtype, shape, offset, nbytes = pid
        t = self.by_index.get(index)
        if t is None:  # one tensor referenced twice stays one tensor
            t = torch.empty(shape, dtype=getattr(torch, dtype))
            if t.numel() * t.element_size() != nbytes:
                raise pickle.UnpicklingError("tensor size mismatch")
            self.by_index[index] = t
            self.tensors.append((t, offset, nbytes))
        return t


def save_state(obj: Any, path: str) -> None:
    """Writes `obj` (dicts, lists, tensors, picklable values) to `path` in
    the fast format; not atomic (Job.save() writes a temp file and renames).
    Tensors come back on the CPU, as plain tensors (not Parameters)."""
    buf = io.BytesIO()
    pickler = _Pickler(buf)
    pickler.dump(obj)
    skeleton = buf.getvalue()
    data_offset = _align(_HEADER.size + len(skeleton))
    with open(path, "wb", buffering=0) as f:
        def write(b):
            view = memoryview(b)
            while len(view):
                n = f.write(view)
                view = view[n:]

        write(_HEADER.pack(MAGIC, FILE_VERSION, 0, len(skeleton), data_offset)
              + skeleton + bytes(data_offset - _HEADER.size - len(skeleton)))
        pos = 0
        for t, offset, nbytes in pickler.tensors:
            if offset > pos:
                write(bytes(offset - pos))
            if nbytes:
                write(_raw(t, nbytes))
            pos = offset + nbytes
        os.fsync(f.fileno())


def _same_layout(dest: Any, t: torch.Tensor) -> bool:
    """dest can take t's bytes: a contiguous CPU tensor of its dtype and
    shape."""
    return (isinstance(dest, torch.Tensor) and dest.device.type == "cpu"
            and dest.dtype == t.dtype and dest.shape == t.shape
            and dest.is_contiguous() and dest.layout == torch.strided
            and not dest.is_quantized)


def is_fast_format(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


class _FileSource:
    """Sequential reads of a checkpoint file (gaps are seeked over)."""

    def __init__(self, f, where: str):
        self.f, self.where = f, where

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise ValueError(f"{self.where}: truncated checkpoint")
        return data

    def readinto(self, view) -> None:
        while len(view):
            n = self.f.readinto(view)
            if not n:
                raise ValueError(f"{self.where}: truncated checkpoint")
            view = view[n:]

    def skip(self, n: int) -> None:
        if n:
            self.f.seek(n, os.SEEK_CUR)


class _SocketSource:
    """Sequential reads of a checkpoint file of `size` bytes from a socket
    (the bulk channel): tensor bytes are received straight into their
    tensors' memory."""

    def __init__(self, sock, size: int, where: str):
        self.sock, self.size, self.where = sock, size, where
        self.pos = 0

    def _short(self) -> ValueError:
        return ValueError(f"{self.where}: the connection ended after "
                          f"{self.pos} of {self.size} bytes")

    def readinto(self, view) -> None:
        if self.pos + len(view) > self.size:
            raise ValueError(f"{self.where}: the checkpoint needs more than "
                             f"the {self.size} bytes offered")
        while len(view):
            n = self.sock.recv_into(view)
            if not n:
                raise self._short()
            self.pos += n
            view = view[n:]

    def read(self, n: int) -> bytes:
        buf = bytearray(n)
        self.readinto(memoryview(buf))
        return bytes(buf)

    def skip(self, n: int) -> None:
        scratch = memoryview(bytearray(min(max(n, 1), 1 << 16)))
        while n:
            k = min(n, len(scratch))
            self.readinto(scratch[:k])
            n -= k


def _plan(read: Callable[[int], bytes], where: str,
          into: Optional[Callable[[Any], Dict[int, torch.Tensor]]]
          ) -> Tuple[Any, List[Tuple[int, memoryview]], int]:
    """Reads a fast-format checkpoint's header and skeleton with read(n);
    returns the object (its tensors allocated, or redirected by `into`, not
    yet read), where each tensor's bytes go ((file offset, writable view),
    in file order) and where the skeleton ends."""
    magic, version, _, skel_len, data_offset = _HEADER.unpack(
        read(_HEADER.size))
    if magic != MAGIC:
        raise ValueError(f"{where}: not a gandiva checkpoint")
    if version != FILE_VERSION:
        raise ValueError(f"{where}: checkpoint file version {version} "
                         f"(this gandiva reads {FILE_VERSION})")
    unpickler = _Unpickler(io.BytesIO(read(skel_len)))
    obj = unpickler.load()
    redirect = into(obj) if into is not None else {}
    regions = []
    skel_end = end = _HEADER.size + skel_len
    for t, offset, nbytes in sorted(unpickler.tensors, key=lambda e: e[1]):
        if nbytes == 0:
            continue
        at = data_offset + offset
        if at < end:
            raise ValueError(f"{where}: tensors overlap in the checkpoint")
        dest = redirect.get(id(t))
        if dest is not None and _same_layout(dest, t):
            t = dest
        regions.append((at, _raw(t, nbytes)))
        end = at + nbytes
    return obj, regions, skel_end


def _read_state(src, where: str,
                into: Optional[Callable[[Any], Dict[int, torch.Tensor]]]
                ) -> Any:
    """The object of a fast-format checkpoint, read in one pass from `src`
    (a _FileSource): header, skeleton, then the tensors in file order."""
    obj, regions, pos = _plan(src.read, where, into)
    for at, view in regions:
        src.skip(at - pos)
        src.readinto(view)
        pos = at + len(view)
    return obj


def load_state(path: str,
               into: Optional[Callable[[Any], Dict[int, torch.Tensor]]] = None
               ) -> Any:
    """Reads a file written by save_state(); tensors are on the CPU.

    into: called with the object as unpickled, its tensors allocated but not
    yet read; it may return {id(tensor): destination} to have a tensor's
    bytes read straight into an existing contiguous CPU tensor of the same
    dtype and shape instead (the caller then uses the destination; the
    allocated tensor stays unread). Reading into memory the process already
    has skips a copy and the page faults of fresh memory."""
    with open(path, "rb", buffering=0) as f:
        return _read_state(_FileSource(f, path), path, into)


def read_stream_offer(directory: str) -> Optional[Dict[str, Any]]:
    """The agent's offer to stream the checkpoint (STREAM_OFFER_FILE in
    `directory`: host, port, token, path, size and the slices of the file
    each parallel stream carries), or None when it left none (the
    checkpoint's files are there instead)."""
    path = os.path.join(directory, gandiva.STREAM_OFFER_FILE)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    offer: Dict[str, Any] = {}
    slices = []
    try:
        for line in lines:
            key, _, value = line.partition(" ")
            if key == "slice":
                start, length = value.split()
                slices.append((int(start), int(length)))
            else:
                offer[key] = value
        out = {"host": offer["host"], "port": int(offer["port"]),
               "token": bytes.fromhex(offer["token"]),
               "path": offer["path"], "size": int(offer["size"])}
        streams = int(offer.get("streams", "1"))
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path}: not a valid stream offer ({e!r})") from None
    if not slices:
        slices = [(0, out["size"])]
    at = 0
    for start, length in slices:
        if start != at or length < 0:
            raise ValueError(f"{path}: the slices do not cover the file")
        at += length
    if at != out["size"] or len(slices) != streams:
        raise ValueError(f"{path}: {len(slices)} slices of {at} bytes for "
                         f"{streams} streams of a {out['size']}-byte file")
    out["slices"] = slices
    return out


def _connect_stream(offer: Dict[str, Any], index: int, where: str,
                    timeout: float):
    """A connection to the source for stream `index`, accepted."""
    import socket
    host = offer["host"]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    sock = socket.create_connection((host, offer["port"]), timeout=timeout)
    try:
        hello = offer["token"]
        if len(offer["slices"]) > 1:
            hello += struct.pack(">I", index)
        sock.sendall(hello)
        src = _SocketSource(sock, len(gandiva.BULK_ACCEPTED), where)
        try:
            accepted = src.read(len(gandiva.BULK_ACCEPTED))
        except ValueError:
            accepted = b""
        if accepted != gandiva.BULK_ACCEPTED:
            raise ConnectionError(f"{where}: the source did not accept the "
                                  "token")
    except BaseException:
        sock.close()
        raise
    return sock


def receive_state(offer: Dict[str, Any],
                  into: Optional[Callable[[Any], Dict[int, torch.Tensor]]]
                  = None, timeout: float = 60.0) -> Any:
    """Reads a save_state() file straight from the source agent's bulk
    channel (an offer from read_stream_offer()): connects once per stream,
    sends the token (and the stream's index), and receives the tensors'
    bytes into their memory (`into` as for load_state), each stream's
    slice of the file by a thread of its own (the socket receives release
    the interpreter lock). `timeout` bounds the connects and each receive.
    Raises ConnectionError (refused, token not accepted) or ValueError (a
    short or malformed stream); a stream that fails stops the others."""
    import threading
    slices = offer.get("slices") or [(0, offer["size"])]
    where = f"checkpoint stream from {offer['host']}:{offer['port']}"
    names = ([where] if len(slices) == 1 else
             [f"{where} (stream {i} of {len(slices)})"
              for i in range(len(slices))])
    socks = []
    try:
        for i, name in enumerate(names):
            socks.append(_connect_stream(offer, i, name, timeout))
        srcs = [_SocketSource(sock, length, name)
                for sock, (_, length), name in zip(socks, slices, names)]
        # The header and skeleton come first, from stream 0 (and on, in
        # the unlikely case they are longer than its slice).
        chain = _Chain(srcs, slices)
        obj, regions, end = _plan(chain.read, where, into)
        if regions:
            end = regions[-1][0] + len(regions[-1][1])
        if end > offer["size"]:
            raise ValueError(f"{where}: the checkpoint needs {end} bytes, "
                             f"{offer['size']} offered")
        errors = []

        def fill(i):
            try:
                _fill_slice(srcs[i], chain.position(i), slices[i], regions)
            except BaseException as e:  # stop the others: they cannot help
                errors.append(e)
                for sock in socks:
                    try:
                        sock.shutdown(2)
                    except OSError:
                        pass

        threads = [threading.Thread(target=fill, args=(i,), daemon=True)
                   for i in range(1, len(srcs))]
        for th in threads:
            th.start()
        fill(0)
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
    finally:
        for sock in socks:
            sock.close()
    return obj


class _Chain:
    """The streams' slices read in file order, for what precedes the
    tensors; remembers how far into each slice it read."""

    def __init__(self, srcs, slices):
        self.srcs, self.slices = srcs, slices
        self.used = [0] * len(srcs)
        self.k = 0

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            if self.k >= len(self.srcs):
                raise ValueError("the checkpoint stream ended in its header")
            left = self.slices[self.k][1] - self.used[self.k]
            if left == 0:
                self.k += 1
                continue
            take = min(left, n - len(out))
            out += self.srcs[self.k].read(take)
            self.used[self.k] += take
        return out

    def position(self, i: int) -> int:
        """The file offset stream i goes on from."""
        return self.slices[i][0] + self.used[i]


def _fill_slice(src, cur: int, piece, regions) -> None:
    """Receives file bytes [cur, end of `piece`) from `src` into the
    `regions` they belong to (gaps are read and dropped)."""
    end = piece[0] + piece[1]
    for at, view in regions:
        r_end = at + len(view)
        if r_end <= cur:
            continue
        if at >= end:
            break
        if at > cur:
            src.skip(at - cur)
            cur = at
        hi = min(r_end, end)
        src.readinto(view[cur - at:hi - at])
        cur = hi
    if cur < end:
        src.skip(end - cur)


def read_checkpoint(path: str,
                    into: Optional[Callable[[Any], Dict[int, torch.Tensor]]]
                    = None) -> Dict[str, Any]:
    """The checkpoint dict of a Job checkpoint: a file, or a directory
    holding checkpoint.gdv (or a legacy torch.save checkpoint.pt). into: see
    load_state (fast format only)."""
    if os.path.isdir(path):
        fast = os.path.join(path, CHECKPOINT_NAME)
        legacy = os.path.join(path, LEGACY_CHECKPOINT_NAME)
        path = fast if os.path.exists(fast) or not os.path.exists(legacy) \
            else legacy
    if is_fast_format(path):
        return load_state(path, into)
    # The job's own checkpoint, trusted like the fast format (which is
    # pickled too): it holds RNG states (numpy arrays, tuples) that
    # PyTorch >= 2.6's weights_only default refuses.
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # a PyTorch without the argument
        return torch.load(path, map_location="cpu")


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


def _load_optimizer(optimizer: torch.optim.Optimizer,
                    state: Dict[str, Any]) -> None:
    """optimizer.load_state_dict() without its deep copy of every state
    tensor (the loaded tensors are ours): big tensors are set aside, the
    rest loads as usual, then the big ones are put back, cast as
    load_state_dict() casts them."""
    big: Dict[Tuple[Any, str], torch.Tensor] = {}
    slim_state = {}
    for pid, st in state["state"].items():
        slim = {}
        for k, v in st.items():
            if torch.is_tensor(v) and k != "step" and v.numel() >= 1024:
                big[(pid, k)] = v
                slim[k] = None
            else:
                slim[k] = v
        slim_state[pid] = slim
    optimizer.load_state_dict({"state": slim_state,
                               "param_groups": state["param_groups"]})
    if not big:
        return
    saved_ids = [i for g in state["param_groups"] for i in g["params"]]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    by_id = dict(zip(saved_ids, params))
    for (pid, k), v in big.items():
        param = by_id.get(pid)
        if param is None:  # state of no parameter: kept as saved
            optimizer.state[pid][k] = v
            continue
        if param.is_floating_point():
            v = v.to(dtype=param.dtype)
        optimizer.state[param][k] = v.to(device=param.device)


def _gpu_identity(local_rank: int, local_ranks: int) -> str:
    """This rank's GPU ("gpu <host> <id>") or why it has none ("cpu: ...").
    A rank needs a visible device of its own: as many as ranks here."""
    if not torch.cuda.is_available():
        return "cpu: no CUDA device visible"
    count = torch.cuda.device_count()
    if count < local_ranks:
        return (f"cpu: {local_ranks} ranks on this server but {count} "
                f"GPU(s) visible")
    index = local_rank % count
    props = torch.cuda.get_device_properties(index)
    ident = getattr(props, "uuid", None)
    if ident is None:  # older torch: the physical index on this host
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        ident = visible[index] if index < len(visible) and visible[index] \
            else str(index)
    import socket
    return f"gpu {socket.gethostname()} {ident}"


def choose_backend(identities: List[str]) -> Tuple[str, str]:
    """The backend every rank uses, from all ranks' _gpu_identity() (index =
    rank): ("nccl", "") when each rank has a GPU no other rank has, else
    ("gloo", why). Every rank computes it from the same list, so all agree."""
    for rank, ident in enumerate(identities):
        if not ident.startswith("gpu "):
            return "gloo", f"rank {rank} has no GPU ({ident[5:]})"
    seen: Dict[str, int] = {}
    for rank, ident in enumerate(identities):
        if ident in seen:
            host, _, device = ident[4:].partition(" ")
            return "gloo", (f"ranks {seen[ident]} and {rank} share one GPU "
                            f"(device {device} on {host}); NCCL needs one "
                            f"per rank")
        seen[ident] = rank
    return "nccl", ""


def init_distributed(timeout_s: float = 1800.0) -> torch.device:
    """Initializes torch.distributed from the launcher's environment
    (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE) with a backend all ranks agree on (choose_backend),
    selects this rank's GPU when it is NCCL, and returns the device to train
    on. With WORLD_SIZE unset or 1 it initializes nothing and returns the
    first GPU if one is visible, else the CPU. Rank 0 prints the choice."""
    import datetime
    import torch.distributed as dist
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    mine = _gpu_identity(local_rank, local_ranks)
    if world <= 1:
        return (torch.device("cuda", 0) if mine.startswith("gpu ")
                else torch.device("cpu"))
    rank = int(os.environ["RANK"])
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(os.environ["MASTER_ADDR"],
                          int(os.environ["MASTER_PORT"]), world, rank == 0,
                          timeout)
    store.set(f"gandiva/gpu/{rank}", mine)
    identities = [store.get(f"gandiva/gpu/{r}").decode() for r in range(world)]
    backend, why = choose_backend(identities)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=rank,
                            world_size=world, timeout=timeout)
    if rank == 0:
        print(f"gandiva: {world} ranks over {backend}"
              + (f": {why}" if why else ""), file=sys.stderr, flush=True)
    return device


def _tell_agent(path: str, text: str) -> None:
    """Writes one of the warm start's small files for the agent atomically
    (temp file, then rename); a failure is only warned about (the agent
    then does without it)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"gandiva: cannot write {path}: {e}")


class Job:
    """A training job cooperating with gandiva.

    model: the torch.nn.Module (may be a DistributedDataParallel wrapper);
    optimizer: its optimizer (or None).
    checkpoint_name: file name of the checkpoint inside the directory.
    samples_per_step: training samples one step consumes (in all ranks
    together); added to `samples` at every boundary. Without it, call
    add_samples() in the loop if you need the count.
    Construction attaches to the agent (gandiva.init()); the checkpoint named
    by GANDIVA_RESUME_FROM is loaded when training starts (first epochs(),
    batches() or step() call, or start()). For a data-parallel job,
    initialize torch.distributed before constructing the Job."""

    def __init__(self, model: torch.nn.Module,
                 optimizer: Optional[torch.optim.Optimizer] = None, *,
                 checkpoint_name: str = CHECKPOINT_NAME,
                 samples_per_step: Optional[int] = None):
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module  # checkpoints load at any world size
        self.model = model
        self.optimizer = optimizer
        self.checkpoint_name = checkpoint_name
        self.samples_per_step = samples_per_step
        self.steps = 0            # mini-batches trained, across restarts
        self.samples = 0          # training samples processed, all ranks
        self.epoch = 0            # epochs completed
        self.batch_in_epoch = 0   # batches trained in the current epoch
        self.restored_from: Optional[str] = None
        # receive(): when the stream's last byte came (CLOCK_MONOTONIC ns).
        self.received_ns: Optional[int] = None
        # The world size the checkpoint was saved with (None: no restore).
        self.restored_world_size: Optional[int] = None
        self.rank, self.world_size = 0, 1
        self._dist = False
        import torch.distributed as dist
        if (dist.is_available() and dist.is_initialized() and
                dist.get_world_size() > 1):
            self._dist = True
            self.rank = dist.get_rank()
            self.world_size = dist.get_world_size()
            if self.rank != 0:
                # Only rank 0 talks to the agent, whatever the launcher did.
                os.environ.pop("GANDIVA_PROGRESS_FILE", None)
            self._bcast_device = (
                torch.device("cuda", torch.cuda.current_device())
                if dist.get_backend() == "nccl" else torch.device("cpu"))
        self._extra: Dict[str, Tuple[Callable[[], Any],
                                     Callable[[Any], None]]] = {}
        self._started = False
        self._epoch_start_rng: Optional[Dict[str, Any]] = None
        self._resume: Optional[Dict[str, Any]] = None
        self._live: Optional[Tuple[Any, Iterator[Any]]] = None
        self._offloaded: list = []
        self._every_steps, self._every_s = gandiva.checkpoint_every()
        self._saved_at = time.monotonic()  # the last periodic save (or start)
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

    def add_samples(self, n: int) -> None:
        """Counts `n` more training samples (all ranks together) for the
        current step; call before the step's boundary."""
        self.samples += int(n)

    # ---- the loop ----

    def start(self, timeout: Optional[float] = None,
              warmup: Optional[Callable[[], Any]] = None) -> bool:
        """Loads GANDIVA_RESUME_FROM if set (once). Returns True if it did.
        On a warm start (GANDIVA_RESUME_WAIT=1) first waits until the agent
        marked the checkpoint ready (at most `timeout` seconds; None:
        forever). Build the model and optimizer before: that is the slow
        setup a warm start does while the job still trains at its source.

        warmup: on a warm start only, called before the wait: a forward and
        backward pass on a dummy batch, say, so that the kernels, the
        cuDNN/cuBLAS handles and the allocator are ready and the first real
        mini-batch after the load runs at full speed. Whatever it changes is
        replaced by the checkpoint (model, buffers, optimizer, RNG); the
        gradients it leaves are cleared. Not for collectives (DDP): use the
        bare module."""
        if self._started:
            return self.restored_from is not None
        self._started = True
        warm = (gandiva.resume_from() is not None
                and os.environ.get("GANDIVA_RESUME_WAIT") == "1")
        if warm and warmup is not None:
            warmup()
            for p in self.model.parameters():
                p.grad = None
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        resume = gandiva.resume_from()
        if warm and not self._dist and os.path.isdir(resume):
            self._offer_to_stream(resume)
        if not gandiva.restore_begin(timeout):
            return False
        offer = read_stream_offer(resume) if warm and not self._dist else None
        if offer is not None:
            self.receive(offer)
            self._report_received(resume)
        else:
            self.load(resume)
        gandiva.set_minibatches(self.steps)
        self._keep_as_periodic(streamed=offer is not None)
        gandiva.restore_end()
        self._saved_at = time.monotonic()
        return True

    def _keep_as_periodic(self, streamed: bool) -> None:
        """With periodic checkpoints on, the checkpoint this run went on
        from becomes the job's last periodic one at once, with its note
        (a move's, a resize's, one saved as its agent stopped: none of
        them left one): a process that fails before its first save goes
        on from there, not from the beginning. A file received elsewhere
        is linked into the checkpoint directory (copied where it cannot
        be); one streamed into memory, which left no file, is saved from
        memory before the first mini-batch."""
        directory = gandiva.checkpoint_dir()
        if (not (self._every_steps or self._every_s) or not directory
                or (self._dist and self.rank != 0)):
            return
        try:
            if streamed:
                path = self.save(directory)
            elif (os.path.dirname(os.path.realpath(self.restored_from)) ==
                  os.path.realpath(directory)):
                path = self.restored_from  # there already
            else:
                path = self._link_into(directory, self.restored_from)
            gandiva.checkpoint_saved(path, self.steps)
        except Exception as e:  # training goes on; its first save will do
            warnings.warn(f"gandiva: keeping the checkpoint of step "
                          f"{self.steps} as the periodic one failed: {e!r}")

    def _link_into(self, directory: str, source: str) -> str:
        """Puts the checkpoint file `source` into `directory` under the
        name load() looks for first: a hard link, or a copy across file
        systems or where the kernel refuses the link (a file owned by
        another user); returns its path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, self.checkpoint_name)
        tmp = os.path.join(directory,
                           f".{self.checkpoint_name}.tmp.{os.getpid()}")
        try:
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        return path

    def _report_received(self, directory: str) -> None:
        """Tells the agent when the stream's last byte came
        (STREAM_DONE_FILE), so that it can tell the transfer from the rest
        of the load (without it, all counts as transfer)."""
        _tell_agent(os.path.join(directory, gandiva.STREAM_DONE_FILE),
                    f"received_ns {self.received_ns}\n")

    def _offer_to_stream(self, directory: str) -> None:
        """Tells the agent, before the warm wait, that this process can take
        its checkpoint file straight from the source's socket (one process:
        a data-parallel job's ranks all read the files). Without it the
        files come as before."""
        _tell_agent(os.path.join(directory, gandiva.STREAM_OK_FILE),
                    self.checkpoint_name + "\n")

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

    def report(self, value: float) -> bool:
        """Reports the job's metric (a loss, an accuracy), shown by `gandiva
        ls` and `gandiva show` with the step it was reported at (see
        gandiva.report_metric). Only rank 0 of a data-parallel job reports.
        False when not reported (outside gandiva, or not rank 0)."""
        if self._dist and self.rank != 0:
            return False
        return gandiva.report_metric(float(value))

    def step(self) -> int:
        """For hand-written loops: call after each mini-batch instead of
        using batches() (the data position is then only the step count)."""
        self.start()
        return self._boundary()

    def _boundary(self, count_only: bool = False) -> int:
        self.steps += 1
        self.batch_in_epoch += 1
        if self.samples_per_step:
            self.samples += self.samples_per_step
        rc = gandiva.step(count_only=count_only)
        if self._dist and not count_only:
            return self._dist_boundary(rc)
        if rc == gandiva.STEP_CHECKPOINT:
            self._checkpoint_and_exit()
        elif rc < 0:
            self._warn(rc)
        if not count_only and self._periodic_due():
            self._save_periodic()
        return rc

    def _periodic_due(self) -> bool:
        """Whether a periodic checkpoint is due at this boundary."""
        if self._every_steps:
            return self.steps % self._every_steps == 0
        if self._every_s:
            return time.monotonic() - self._saved_at >= self._every_s
        return False

    def _save_periodic(self, **kw) -> None:
        """Saves the periodic checkpoint, then its note for the agent."""
        directory = gandiva.checkpoint_dir()
        if directory:
            try:
                path = self.save(directory, **kw)
                gandiva.checkpoint_saved(path, self.steps)
            except Exception as e:  # training goes on; the last one stands
                warnings.warn(f"gandiva: periodic checkpoint at step "
                              f"{self.steps} failed: {e!r}")
        self._saved_at = time.monotonic()

    def _warn(self, rc: int) -> None:
        warnings.warn(f"gandiva: request failed at step {self.steps}: "
                      f"{gandiva.strerror(rc)}")

    def _broadcast(self, value: int) -> int:
        import torch.distributed as dist
        t = torch.tensor([value], dtype=torch.int64, device=self._bcast_device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def _dist_boundary(self, rc: int) -> int:
        """Rank 0 decided (its gandiva.step() returned `rc`; the others'
        only counted); every rank learns whether to checkpoint and exit (1)
        or save a periodic checkpoint and train on (2)."""
        import torch.distributed as dist
        decision = 0
        if self.rank == 0:
            decision = (1 if rc == gandiva.STEP_CHECKPOINT else
                        2 if self._periodic_due() else 0)
        decision = self._broadcast(decision)
        if self.rank == 0 and rc < 0:
            self._warn(rc)
        if not decision:
            return rc if self.rank == 0 else gandiva.STEP_CONTINUE
        # Rank 0 saves one replica plus every rank's RNG streams.
        rngs = (_rng_state(), self._epoch_start_rng)
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(rngs, gathered, dst=0)
        if decision == 2:
            if self.rank == 0:
                self._save_periodic(rank_rng=gathered)
            return rc if self.rank == 0 else gandiva.STEP_CONTINUE
        status = 0
        if self.rank == 0:
            ok = self._try_save(gandiva.checkpoint_dir(), rank_rng=gathered)
            status = gandiva.checkpoint_done(ok)
        status = self._broadcast(status)
        if status:
            # Every rank has the status; leave without tearing the process
            # group down: a gloo teardown at interpreter exit racing with a
            # peer that already left can abort the process ("terminate
            # called without an active exception", status 134 instead of
            # 75/76). The page already says the job exits (checkpoint_done).
            dist.barrier()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        return gandiva.STEP_CONTINUE  # the save failed; train on

    def _try_save(self, directory: str, **kw) -> bool:
        try:
            self.save(directory, **kw)
            return True
        except Exception:  # the agent learns of it; training goes on
            import traceback
            traceback.print_exc()
            return False

    def _checkpoint_and_exit(self) -> None:
        ok = self._try_save(gandiva.checkpoint_dir())
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
            "samples": self.samples,
            "world_size": self.world_size,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "model": self.model.state_dict(),
            "optimizer": (self.optimizer.state_dict()
                          if self.optimizer is not None else None),
            "rng": _rng_state(),
            # Restored but not yet replayed (between start() and the first
            # batches()): the restored epoch's start.
            "epoch_start_rng": (self._resume["epoch_start_rng"]
                                if self._resume is not None else
                                self._epoch_start_rng),
            "extra": {name: get() for name, (get, _) in self._extra.items()},
        }

    def save(self, directory: str, *, legacy: bool = False,
             rank_rng: Optional[list] = None) -> str:
        """Writes the checkpoint into `directory` atomically (temp file, then
        rename); returns its path. legacy=True writes torch.save's format
        (slow; for comparisons). rank_rng: every rank's (rng, epoch start
        rng), saved by a data-parallel job."""
        os.makedirs(directory, exist_ok=True)
        name = LEGACY_CHECKPOINT_NAME if legacy else self.checkpoint_name
        path = os.path.join(directory, name)
        tmp = os.path.join(directory, f".{name}.tmp.{os.getpid()}")
        state = self.state_dict()
        if rank_rng is not None:
            state["rank_rng"] = rank_rng
        try:
            if legacy:
                with open(tmp, "wb") as f:
                    torch.save(state, f)
                    f.flush()
                    os.fsync(f.fileno())
            else:
                save_state(state, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def load(self, path: str) -> None:
        """Loads a checkpoint (a file, or a directory holding one; files
        written by torch.save load too)."""
        if os.path.isdir(path):
            fast = os.path.join(path, self.checkpoint_name)
            if not os.path.exists(fast) and os.path.exists(
                    os.path.join(path, LEGACY_CHECKPOINT_NAME)):
                fast = os.path.join(path, LEGACY_CHECKPOINT_NAME)
            path = fast
        self._apply(read_checkpoint(path, self._in_place), path)

    def receive(self, offer: Dict[str, Any]) -> None:
        """Loads the checkpoint straight from the source agent's bulk
        channel (a warm start's STREAM_OFFER_FILE; see read_stream_offer):
        the bytes go from the socket into the model's and optimizer's
        memory, with no file in between."""
        where = f"{offer['host']}:{offer['port']}/{offer['path']}"
        state = receive_state(offer, self._in_place)
        self.received_ns = _lib.time_monotonic_ns()
        self._apply(state, where)

    def _apply(self, state: Dict[str, Any], path: str) -> None:
        if state.get("format") != _FORMAT:
            raise ValueError(f"{path}: unknown checkpoint format "
                             f"{state.get('format')}")
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state["optimizer"] is not None:
            _load_optimizer(self.optimizer, state["optimizer"])
        rank_rng = state.get("rank_rng")
        if rank_rng is not None and len(rank_rng) == self.world_size:
            # Same world size: every rank goes on with its own streams.
            state["rng"], state["epoch_start_rng"] = rank_rng[self.rank]
        for name, value in state["extra"].items():
            if name in self._extra:
                self._extra[name][1](value)
            else:
                warnings.warn(f"gandiva: checkpoint state {name!r} is not "
                              "registered; ignored")
        self.steps = state["steps"]
        self.samples = state.get("samples", 0)
        self.restored_world_size = state.get("world_size", 1)
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

    def _in_place(self, state: Any) -> Dict[int, torch.Tensor]:
        """For load_state: the checkpoint's model tensors go straight into
        the model's CPU parameters and buffers, and its optimizer state into
        the optimizer's where that exists already (after a warm start's
        warmup), with the same dtype and shape; `state` then refers to
        those. Anything else is read as usual."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            return {}
        proposed: Dict[int, torch.Tensor] = {}
        refused = set()
        places = []  # (container, key, placeholder)

        def propose(container, key, ph, dest):
            if not (torch.is_tensor(ph) and _same_layout(dest, ph)):
                return
            prev = proposed.get(id(ph))
            if prev is not None and prev.data_ptr() != dest.data_ptr():
                refused.add(id(ph))  # one saved tensor, two places here
                return
            proposed[id(ph)] = dest
            places.append((container, key, ph))

        saved_model = state.get("model")
        if isinstance(saved_model, dict):
            mine = self.model.state_dict()
            for name, ph in saved_model.items():
                propose(saved_model, name, ph, mine.get(name))
        saved_opt = state.get("optimizer")
        if self.optimizer is not None and isinstance(saved_opt, dict):
            ids = [i for g in saved_opt.get("param_groups", [])
                   for i in g["params"]]
            params = [p for g in self.optimizer.param_groups
                      for p in g["params"]]
            if len(ids) == len(params):
                for pid, p in zip(ids, params):
                    now = self.optimizer.state.get(p)
                    then = saved_opt.get("state", {}).get(pid)
                    if not now or not isinstance(then, dict):
                        continue
                    for k, ph in then.items():
                        if k != "step":
                            propose(then, k, ph, now.get(k))
        out = {}
        for container, key, ph in places:
            if id(ph) in refused:
                continue
            out[id(ph)] = proposed[id(ph)]
            container[key] = proposed[id(ph)]
        return out

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
