"""Migration support in the Python package: the fast checkpoint format, the
warm start (a process that waits for its checkpoint) and a checkpoint asked
while the job is suspended. The tests play the node agent."""

import os
import random
import signal
import struct

import pytest
import torch

import gandiva
import gandiva.torch
from gandiva import agent
from conftest import (child_env, finish, start_child, wait_for, wait_stopped)
from test_torch_job import read_log, run_to_end


def make(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.BatchNorm1d(12),
                                torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(12, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, opt


def train(model, opt, n, job=None, device="cpu"):
    for _ in range(n):
        x = torch.randn(8, 6, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if job is not None:
            job.add_samples(8)
            job.step()


def test_fast_format_round_trip_is_bit_identical(tmp_path, monkeypatch):
    for name in ("GANDIVA_PROGRESS_FILE", "GANDIVA_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)
    model, opt = make()
    job = gandiva.torch.Job(model, opt)
    extra = {"half": torch.arange(5, dtype=torch.float16), "n": 3}
    job.register_state("extra", get=lambda: extra, set=extra.update)
    train(model, opt, 5, job)
    random.seed(5)
    path = job.save(str(tmp_path))
    assert os.path.basename(path) == gandiva.torch.CHECKPOINT_NAME
    with open(path, "rb") as f:
        magic, version, _, skel, data = struct.unpack("<8sIIQQ", f.read(32))
    assert magic == gandiva.torch.MAGIC and version == 1 and data % 64 == 0
    # What the job does next, from the saved state.
    train(model, opt, 3)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    after = (random.random(), torch.rand(3))

    model2, opt2 = make(seed=1)
    job2 = gandiva.torch.Job(model2, opt2)
    extra2 = {}
    job2.register_state("extra", get=lambda: extra2, set=extra2.update)
    random.seed(99)
    torch.manual_seed(99)
    job2.load(str(tmp_path))
    assert (job2.steps, job2.samples, job2.restored_world_size) == (5, 40, 1)
    assert extra2["n"] == 3 and extra2["half"].dtype == torch.float16
    assert torch.equal(extra2["half"], extra["half"])
    # Adam state (exp_avg, exp_avg_sq, step) restored exactly.
    saved = gandiva.torch.read_checkpoint(path)["optimizer"]["state"]
    for i, q in enumerate(model2.parameters()):
        assert set(opt2.state[q]) == {"step", "exp_avg", "exp_avg_sq"}
        for k, v in saved[i].items():
            assert torch.equal(opt2.state[q][k], v), (i, k)
    train(model2, opt2, 3)  # dropout and data draw from the restored RNG
    for k, v in model2.state_dict().items():
        assert torch.equal(v, expected[k]), k
    assert random.random() == after[0]
    assert torch.equal(torch.rand(3), after[1])

    # A torch.save checkpoint (older gandiva) still loads, identically.
    legacy_dir = tmp_path / "legacy"
    job.load(str(tmp_path))
    job.save(str(legacy_dir), legacy=True)
    assert sorted(os.listdir(legacy_dir)) == ["checkpoint.pt"]
    model3, opt3 = make(seed=2)
    job3 = gandiva.torch.Job(model3, opt3)
    job3.register_state("extra", get=lambda: {}, set=lambda d: None)
    job3.load(str(legacy_dir))
    assert job3.steps == 5
    train(model3, opt3, 3)
    for k, v in model3.state_dict().items():
        assert torch.equal(v, expected[k]), k


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round_trip_is_bit_identical(tmp_path, monkeypatch):
    """A model trained on the GPU: the checkpoint holds host copies, and a
    fresh model on the GPU continues exactly (CUDA RNG included)."""
    for name in ("GANDIVA_PROGRESS_FILE", "GANDIVA_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)
    torch.backends.cudnn.deterministic = True

    def cuda_make(seed):
        model, _ = make(seed)
        model = model.cuda()
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    model, opt = cuda_make(0)
    job = gandiva.torch.Job(model, opt)
    train(model, opt, 5, job, "cuda")
    path = job.save(str(tmp_path))
    saved = gandiva.torch.read_checkpoint(path)
    assert all(v.device.type == "cpu" for v in saved["model"].values())
    train(model, opt, 3, device="cuda")  # dropout, data: the CUDA RNG
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2 = cuda_make(1)
    job2 = gandiva.torch.Job(model2, opt2)
    torch.cuda.manual_seed_all(99)
    job2.load(str(tmp_path))
    assert job2.steps == 5
    assert all(p.device.type == "cuda" for p in model2.parameters())
    assert all(v.device.type == "cuda" for st in opt2.state.values()
               for k, v in st.items() if k != "step" and torch.is_tensor(v))
    train(model2, opt2, 3, device="cuda")
    for k, v in model2.state_dict().items():
        assert torch.equal(v, expected[k]), k


def test_load_reads_into_the_models_and_a_warm_optimizers_memory(
        tmp_path, monkeypatch):
    """The checkpoint's bytes go straight into the parameters, buffers and
    (once a warmup created it) the optimizer state the process has."""
    for name in ("GANDIVA_PROGRESS_FILE", "GANDIVA_RESUME_FROM"):
        monkeypatch.delenv(name, raising=False)

    def big(seed):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64),
                                    torch.nn.BatchNorm1d(64),
                                    torch.nn.Linear(64, 64))
        return model, torch.optim.Adam(model.parameters(), lr=0.01)

    def step(model, opt):
        model(torch.randn(8, 64)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    model, opt = big(0)
    job = gandiva.torch.Job(model, opt)
    for _ in range(3):
        step(model, opt)
    job.save(str(tmp_path))
    want_model = {k: v.clone() for k, v in model.state_dict().items()}
    want_opt = [{k: v.clone() for k, v in opt.state[p].items()}
                for p in model.parameters()]

    for warm in (True, False):
        model2, opt2 = big(1)
        if warm:
            step(model2, opt2)  # what a warmup leaves: optimizer state
        where = {k: v.data_ptr() for k, v in model2.state_dict().items()}
        where_opt = [{k: v.data_ptr() for k, v in opt2.state[p].items()
                      if k != "step"} for p in model2.parameters()]
        gandiva.torch.Job(model2, opt2).load(str(tmp_path))
        for k, v in model2.state_dict().items():
            assert v.data_ptr() == where[k], k
            assert torch.equal(v, want_model[k]), k
        for i, p in enumerate(model2.parameters()):
            for k, v in opt2.state[p].items():
                assert torch.equal(v, want_opt[i][k]), (i, k)
                if warm and k != "step" and v.numel() >= 1024:
                    assert v.data_ptr() == where_opt[i][k], (i, k)


def test_save_state_keeps_shared_and_odd_tensors(tmp_path):
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    obj = {"a": base, "b": base, "t": base.t(), "empty": torch.empty(0, 3),
           "bool": torch.tensor([True, False]), "scalar": torch.tensor(7),
           "bf16": torch.ones(3, dtype=torch.bfloat16), "list": [1, "x"]}
    path = str(tmp_path / "s.gdv")
    gandiva.torch.save_state(obj, path)
    back = gandiva.torch.load_state(path)
    assert back["a"] is back["b"]
    for k in ("a", "t", "empty", "bool", "scalar", "bf16"):
        assert back[k].dtype == obj[k].dtype and torch.equal(back[k], obj[k])
    assert back["list"] == [1, "x"]


def checkpoint_at(tmp_path, lib_path, reap, steps, seed, hold_at, ckpt):
    """Runs a source job to `hold_at` and checkpoints it into `ckpt`."""
    page = tmp_path / "progress-src"
    agent.create_page(page)
    hold, release = tmp_path / "hold", tmp_path / "release"
    src = start_child(["--steps", steps, "--seed", seed, "--hold-at", hold_at,
                       "--hold-file", hold, "--release-file", release],
                      child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                                GANDIVA_CHECKPOINT_DIR=ckpt))
    reap(src)
    wait_for(hold.exists, "the source to reach the hold")
    agent.request(page, agent.REQUEST_CHECKPOINT_EXIT)
    release.touch()
    status, _, err = finish(src)
    assert status == 75, err


def start_warm(tmp_path, lib_path, reap, steps, seed, incoming, warmup=True):
    page = tmp_path / "progress-warm"
    agent.create_page(page)
    out = tmp_path / "warm.pt"
    incoming.mkdir()
    warm = start_child(["--steps", steps, "--seed", seed, "--out", out]
                       + (["--warmup"] if warmup else []),
                       child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                                 GANDIVA_RESUME_FROM=incoming,
                                 GANDIVA_RESUME_WAIT=1))
    reap(warm)
    wait_for(lambda: agent.read_page(page).state == agent.STATE_WAITING,
             "the warm process to wait")
    return warm, page, out


@pytest.mark.parametrize("warmup", [False, True])
def test_warm_start_waits_for_the_checkpoint_then_continues_identically(
        tmp_path, lib_path, reap, warmup):
    steps, seed, hold_at = 24, 3, 9
    ref, _ = run_to_end(tmp_path, lib_path, "ref", steps, seed)

    # The destination process starts first: it builds its model and waits.
    ckpt = tmp_path / "ckpt"
    warm, page2, out2 = start_warm(tmp_path, lib_path, reap, steps, seed,
                                   ckpt, warmup)
    assert agent.read_page(page2).pid == warm.pid

    # The source job checkpoints and exits.
    checkpoint_at(tmp_path, lib_path, reap, steps, seed, hold_at, ckpt)
    info = agent.read_page(page2)
    assert info.state == agent.STATE_WAITING  # files there, not marked ready
    assert info.restore_begin_ns == 0

    ready_ns = agent.monotonic_ns()
    agent.mark_ready(ckpt)
    status, out, err = finish(warm)
    assert status == 0, err
    assert ("warmup ran" in out) == warmup, out
    info = agent.read_page(page2)
    assert info.restore_begin_ns >= ready_ns
    assert info.restore_end_ns >= info.restore_begin_ns
    assert info.minibatches == steps
    print(f"warm start: ready -> restore begin "
          f"{(info.restore_begin_ns - ready_ns) / 1e6:.2f} ms, load "
          f"{(info.restore_end_ns - info.restore_begin_ns) / 1e6:.2f} ms")
    resumed = torch.load(out2)
    assert resumed["steps"] == steps
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert torch.equal(ref["rng_sample"], resumed["rng_sample"])


class FakeSource:
    """Plays the source agent's bulk channel for one file: accepts a
    connection per slice, checks the token (and, with several slices, the
    stream index), answers GNDVBLK1 and sends the slice's bytes (the last
    slice cut short by `cut` bytes, then closed)."""

    def __init__(self, path, cut=0, slices=None):
        import socket
        import threading
        self.data = open(path, "rb").read()
        self.slices = slices or [(0, len(self.data))]
        self.cut = cut
        self.token = os.urandom(32)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.hellos = []
        self.threads = []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self):
        import threading
        for _ in self.slices:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            th = threading.Thread(target=self._serve, args=(conn,),
                                  daemon=True)
            th.start()
            self.threads.append(th)

    def _serve(self, conn):
        with conn:
            want = 32 + (4 if len(self.slices) > 1 else 0)
            got = b""
            while len(got) < want:
                chunk = conn.recv(want - len(got))
                if not chunk:
                    break
                got += chunk
            self.hellos.append(got)
            if got[:32] != self.token:
                return
            index = (struct.unpack(">I", got[32:36])[0]
                     if len(self.slices) > 1 else 0)
            start, length = self.slices[index]
            if index == len(self.slices) - 1:
                length -= self.cut
            conn.sendall(gandiva.BULK_ACCEPTED +
                         self.data[start:start + length])

    def offer(self, directory, token=None):
        agent.offer_stream(directory, "127.0.0.1", self.port,
                           token or self.token, gandiva.torch.CHECKPOINT_NAME,
                           len(self.data), self.slices)

    def offer_dict(self):
        return {"host": "127.0.0.1", "port": self.port, "token": self.token,
                "path": "x", "size": len(self.data), "slices": self.slices}

    def close(self):
        self.accepter.join(timeout=WAIT_S)
        for th in self.threads:
            th.join(timeout=WAIT_S)
        self.listener.close()


WAIT_S = 60


@pytest.mark.parametrize("warmup", [False, True])
def test_warm_start_takes_its_checkpoint_straight_from_the_source(
        tmp_path, lib_path, reap, warmup):
    steps, seed, hold_at = 24, 5, 11
    ref, _ = run_to_end(tmp_path, lib_path, "ref", steps, seed)
    incoming = tmp_path / "incoming"
    warm, page, out = start_warm(tmp_path, lib_path, reap, steps, seed,
                                 incoming, warmup)
    # A one-process job says it can take its checkpoint from a socket.
    ok = incoming / gandiva.STREAM_OK_FILE
    assert ok.read_text() == gandiva.torch.CHECKPOINT_NAME + "\n"

    ckpt = tmp_path / "ckpt"
    checkpoint_at(tmp_path, lib_path, reap, steps, seed, hold_at, ckpt)
    path = ckpt / gandiva.torch.CHECKPOINT_NAME
    # Over one stream, or (with the warmup) two.
    streams = 2 if warmup else 1
    source = FakeSource(path, slices=split(path.stat().st_size, streams, 64))
    source.offer(incoming)
    agent.mark_ready(incoming)
    status, _, err = finish(warm)
    source.close()
    assert status == 0, err
    assert sorted(h[:32] for h in source.hellos) == [source.token] * streams
    # Nothing of the checkpoint was written where the job waited.
    assert not (incoming / gandiva.torch.CHECKPOINT_NAME).exists()
    info = agent.read_page(page)
    assert info.minibatches == steps
    assert info.restore_end_ns > info.restore_begin_ns > 0
    # When the last byte came, for the agent to split transfer and load.
    key, value = (incoming / gandiva.STREAM_DONE_FILE).read_text().split()
    assert key == "received_ns"
    assert info.restore_begin_ns <= int(value) <= info.restore_end_ns
    resumed = torch.load(out)
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert torch.equal(ref["rng_sample"], resumed["rng_sample"])


@pytest.mark.parametrize("streamed", [False, True])
def test_a_moved_job_saving_periodically_keeps_the_moves_checkpoint_at_once(
        tmp_path, lib_path, reap, streamed):
    """A job with periodic checkpoints makes the checkpoint it was moved
    with its last periodic one as it starts: SIGKILLed before its first
    save at its new place, it goes on from the move, not from the
    beginning. A received file is linked, not copied; a streamed one is
    saved from memory."""
    steps, seed, hold_at, killed_at, every = 30, 5, 11, 17, 100
    ref, _ = run_to_end(tmp_path, lib_path, "ref", steps, seed)
    incoming = tmp_path / "incoming"
    mine = tmp_path / "mine"
    incoming.mkdir()
    page = tmp_path / "progress-warm"
    agent.create_page(page)
    hold, release = tmp_path / "hold-warm", tmp_path / "release-warm"
    warm = start_child(
        ["--steps", steps, "--seed", seed, "--hold-at", killed_at,
         "--hold-file", hold, "--release-file", release],
        child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                  GANDIVA_RESUME_FROM=incoming, GANDIVA_RESUME_WAIT=1,
                  GANDIVA_CHECKPOINT_DIR=mine,
                  GANDIVA_CHECKPOINT_EVERY_MINIBATCHES=every))
    reap(warm)
    wait_for(lambda: agent.read_page(page).state == agent.STATE_WAITING,
             "the warm process to wait")
    source = None
    if streamed:
        ckpt = tmp_path / "ckpt"
        checkpoint_at(tmp_path, lib_path, reap, steps, seed, hold_at, ckpt)
        source = FakeSource(ckpt / gandiva.torch.CHECKPOINT_NAME)
        source.offer(incoming)
    else:
        checkpoint_at(tmp_path, lib_path, reap, steps, seed, hold_at,
                      incoming)
    agent.mark_ready(incoming)
    wait_for(hold.exists, "the moved job to reach the hold")
    if source is not None:
        source.close()
    os.kill(warm.pid, signal.SIGKILL)
    status, _, _ = finish(warm)
    assert status == -signal.SIGKILL

    # What the agent keeps for the next run: the move's checkpoint.
    name = gandiva.torch.CHECKPOINT_NAME
    kept = mine / name
    note = (mine / gandiva.SAVED_FILE).read_text().split("\n")
    assert note == [f"minibatches {hold_at + 1}", f"path {name}",
                    f"mtime_ns {kept.stat().st_mtime_ns}", ""]
    if streamed:
        assert not (incoming / name).exists()
    else:
        assert kept.stat().st_ino == (incoming / name).stat().st_ino
    assert gandiva.torch.read_checkpoint(str(mine))["steps"] == hold_at + 1

    # The next run goes on from it: the parameters of a run never moved.
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    resumed, _ = run_to_end(tmp_path, lib_path, "resumed", steps, seed,
                            GANDIVA_PROGRESS_FILE=page2,
                            GANDIVA_RESUME_FROM=mine,
                            GANDIVA_CHECKPOINT_DIR=mine,
                            GANDIVA_CHECKPOINT_EVERY_MINIBATCHES=every)
    assert resumed["steps"] == steps
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert torch.equal(ref["rng_sample"], resumed["rng_sample"])


def test_a_run_going_on_from_a_checkpoint_in_its_own_directory_notes_it(
        tmp_path, lib_path, reap):
    """A run that goes on from a checkpoint already in its checkpoint
    directory but saved with no note (a resize's, one saved as its agent
    stopped) notes that file as its periodic checkpoint, in place: no
    copy."""
    steps, seed, every = 12, 5, 100
    mine = tmp_path / "mine"
    checkpoint_at(tmp_path, lib_path, reap, steps, seed, 4, mine)
    name = gandiva.torch.CHECKPOINT_NAME
    assert not (mine / gandiva.SAVED_FILE).exists()
    ino = (mine / name).stat().st_ino
    page = tmp_path / "progress2"
    agent.create_page(page)
    hold, release = tmp_path / "hold2", tmp_path / "release2"
    proc = start_child(
        ["--steps", steps, "--seed", seed, "--hold-at", 7,
         "--hold-file", hold, "--release-file", release],
        child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                  GANDIVA_RESUME_FROM=mine, GANDIVA_CHECKPOINT_DIR=mine,
                  GANDIVA_CHECKPOINT_EVERY_MINIBATCHES=every))
    reap(proc)
    wait_for(hold.exists, "the job to reach the hold")
    assert (mine / name).stat().st_ino == ino
    assert sorted(os.listdir(mine)) == [gandiva.SAVED_FILE, name]
    assert (mine / gandiva.SAVED_FILE).read_text().split("\n") == [
        "minibatches 5", f"path {name}",
        f"mtime_ns {(mine / name).stat().st_mtime_ns}", ""]
    release.touch()
    status, _, err = finish(proc)
    assert status == 0, err


@pytest.mark.parametrize("cut", ["token", "short"])
def test_a_stream_that_fails_fails_the_warm_process_with_the_reason(
        tmp_path, lib_path, reap, cut):
    steps, seed = 12, 2
    incoming = tmp_path / "incoming"
    warm, page, _ = start_warm(tmp_path, lib_path, reap, steps, seed,
                               incoming, warmup=False)
    ckpt = tmp_path / "ckpt"
    checkpoint_at(tmp_path, lib_path, reap, steps, seed, 4, ckpt)
    path = ckpt / gandiva.torch.CHECKPOINT_NAME
    size = path.stat().st_size
    source = FakeSource(path, cut=0 if cut == "token" else 100)
    source.offer(incoming, token=os.urandom(32) if cut == "token" else None)
    agent.mark_ready(incoming)
    status, _, err = finish(warm)
    source.close()
    assert status != 0
    if cut == "token":
        assert "did not accept the token" in err, err
    else:
        assert f"after {size - 100} of {size} bytes" in err, err
    assert agent.read_page(page).restore_end_ns == 0


def split(size, streams, align=4096):
    """Slices as the agent cuts them: contiguous, at multiples of `align`."""
    cuts = [min(size, (size * i // streams) // align * align)
            for i in range(streams)] + [size]
    return [(cuts[i], cuts[i + 1] - cuts[i]) for i in range(streams)]


@pytest.mark.parametrize("streams,align", [(1, 4096), (2, 4096), (3, 4096),
                                           (5, 16)])
def test_a_stream_reads_like_the_file(tmp_path, streams, align):
    """receive_state() gives what load_state() gives, tensors and all, for a
    file with shared, empty and odd-sized tensors, over one stream or
    several whose slices cut tensors (and, with 16-byte slices first, the
    skeleton) anywhere."""
    big = torch.arange(100_003, dtype=torch.float64)
    obj = {"a": big, "b": big, "e": torch.empty(0), "h": torch.ones(
        7, dtype=torch.float16), "n": [1, "x"], "i": torch.arange(5),
        "w": torch.randn(3000, 7)}
    path = tmp_path / "s.gdv"
    gandiva.torch.save_state(obj, str(path))
    size = path.stat().st_size
    slices = split(size, streams, 4096)
    if align == 16:  # tiny slices first: the header spans several streams
        slices = [(0, 16), (16, 16), (32, 16), (48, 16), (64, size - 64)]
    source = FakeSource(path, slices=slices)
    got = gandiva.torch.receive_state(source.offer_dict())
    source.close()
    if streams > 1:
        assert sorted(h[32:] for h in source.hellos) == [
            struct.pack(">I", i) for i in range(len(slices))]
    ref = gandiva.torch.load_state(str(path))
    assert got.keys() == ref.keys() and got["n"] == [1, "x"]
    assert got["a"] is got["b"]
    for k in ("a", "e", "h", "i", "w"):
        assert got[k].dtype == ref[k].dtype and torch.equal(got[k], ref[k]), k


def test_one_stream_failing_fails_the_receive_and_stops_the_others(tmp_path):
    obj = {"w": torch.randn(600_000)}
    path = tmp_path / "s.gdv"
    gandiva.torch.save_state(obj, str(path))
    size = path.stat().st_size
    source = FakeSource(path, cut=5000, slices=split(size, 2))
    with pytest.raises(ValueError, match=r"stream 1 of 2\): the connection "
                       r"ended after"):
        gandiva.torch.receive_state(source.offer_dict())
    source.close()


def test_a_malformed_offer_is_refused_with_the_reason(tmp_path):
    agent.offer_stream(tmp_path, "127.0.0.1", 1, b"t" * 32, "c.gdv", 100,
                       [(0, 40), (50, 50)])
    with pytest.raises(ValueError, match="slices do not cover the file"):
        gandiva.torch.read_stream_offer(str(tmp_path))
    (tmp_path / gandiva.STREAM_OFFER_FILE).write_text("host h\nport x\n")
    with pytest.raises(ValueError, match="not a valid stream offer"):
        gandiva.torch.read_stream_offer(str(tmp_path))
    assert gandiva.torch.read_stream_offer(str(tmp_path / "none")) is None


def test_checkpoint_asked_while_suspended_trains_no_extra_batch(
        tmp_path, lib_path, reap):
    page = tmp_path / "progress"
    ckpt = tmp_path / "ckpt"
    log = tmp_path / "log"
    hold, release = tmp_path / "hold", tmp_path / "release"
    agent.create_page(page)
    proc = start_child(["--steps", 50, "--hold-at", 5, "--hold-file", hold,
                        "--release-file", release, "--log", log],
                       child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                                 GANDIVA_CHECKPOINT_DIR=ckpt))
    reap(proc)
    wait_for(hold.exists, "the job to reach batch 5")
    agent.request(page, agent.REQUEST_SUSPEND)
    release.touch()
    wait_stopped(proc.pid)
    assert agent.read_page(page).state == agent.STATE_SUSPENDED
    seq = agent.request(page, agent.REQUEST_CHECKPOINT_EXIT)
    os.kill(proc.pid, signal.SIGCONT)
    status, _, err = finish(proc)
    assert status == 75, err
    info = agent.read_page(page)
    assert info.done_seq == seq and info.exit_code == 75
    assert info.minibatches == 6
    lines = read_log(log)
    assert lines[-4:] == ["begin 5", "end 5", "offload", "reload"], lines[-6:]
    assert gandiva.torch.read_checkpoint(str(ckpt))["steps"] == 6
