"""A data-parallel job (examples/train_ddp.py, gloo on CPU) started by the
launcher (python -m gandiva.launch) and resized: world size 1 -> 2 -> 1
through RESIZE requests on rank 0's page (exit 76, restart with the new size
and GANDIVA_RESUME_FROM), ending at exactly the target number of samples;
and a checkpoint-and-exit + warm restart at the same world size, which is
bit-identical to an uninterrupted run. The test plays the node agent."""

import shutil
import subprocess
import sys

import torch

import gandiva.torch
from gandiva import agent
from conftest import PYTHON_DIR, child_env, finish, wait_for

EXAMPLE = PYTHON_DIR.parent / "examples" / "train_ddp.py"
SAMPLES = 3200


def launch(lib_path, nproc, out=None, extra=(), **env):
    args = [sys.executable, "-m", "gandiva.launch", "--nproc", str(nproc),
            "--", str(EXAMPLE), "--samples", str(SAMPLES), "--log-every", "0"]
    if out is not None:
        args += ["--out", str(out)]
    return subprocess.Popen(args + [str(a) for a in extra],
                            env=child_env(lib_path, **env), process_group=0,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_to_end(lib_path, nproc, out, **env):
    status, stdout, err = finish(launch(lib_path, nproc, out, **env))
    assert status == 0, err
    assert f"done samples={SAMPLES} " in stdout, stdout
    return torch.load(out), stdout


def request_after(page, proc, steps, kind, arg=0):
    """Posts a request once rank 0 passed `steps` more boundaries."""
    wait_for(lambda: agent.read_page(page).state == agent.STATE_RUNNING,
             "rank 0 to attach")
    start = agent.read_page(page).minibatches
    wait_for(lambda: agent.read_page(page).minibatches >= start + steps or
             proc.poll() is not None, "progress")
    return agent.request(page, kind, arg)


def test_resize_1_2_1_keeps_the_sample_position(tmp_path, lib_path, reap):
    ref, _ = run_to_end(lib_path, 1, tmp_path / "ref.pt")
    ckpt = tmp_path / "ckpt"
    sizes = [1, 2, 1]
    out = tmp_path / "resized.pt"
    stdout = ""
    for i, (nproc, new) in enumerate(zip(sizes, sizes[1:] + [None])):
        page = tmp_path / f"progress{i}"
        agent.create_page(page)
        env = dict(GANDIVA_PROGRESS_FILE=page, GANDIVA_CHECKPOINT_DIR=ckpt,
                   GANDIVA_WORLD_SIZE=nproc)
        if i > 0:
            env["GANDIVA_RESUME_FROM"] = ckpt
        proc = launch(lib_path, nproc,
                      out if new is None else None,
                      extra=["--min-step-ms", "3"] if new else [], **env)
        reap(proc)
        if new is None:
            status, stdout, err = finish(proc)
            assert status == 0, err
            break
        request_after(page, proc, 20, agent.REQUEST_RESIZE, new)
        status, stdout, err = finish(proc)
        assert status == 76, err
        info = agent.read_page(page)
        assert info.exit_code == 76 and info.target_world_size == new
        assert info.pid not in (0, proc.pid)  # rank 0, not the launcher
        saved = gandiva.torch.read_checkpoint(str(ckpt))
        assert saved["world_size"] == nproc
        assert saved["samples"] < SAMPLES
    assert f"done samples={SAMPLES} " in stdout, stdout
    assert "world_size=1" in stdout
    resized = torch.load(out)
    for name, tensor in ref.items():
        # Not bit-identical: the world size changes the batches and the
        # reduction order; both runs converge to the same solution.
        assert torch.allclose(tensor, resized[name], atol=1e-4), name


def test_checkpoint_and_warm_restart_at_world_size_2_is_bit_identical(
        tmp_path, lib_path, reap):
    ref, _ = run_to_end(lib_path, 2, tmp_path / "ref.pt")
    ckpt = tmp_path / "ckpt"
    # The destination starts first and waits (every rank) for the ready file.
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    out = tmp_path / "migrated.pt"
    warm = launch(lib_path, 2, out, GANDIVA_PROGRESS_FILE=page2,
                  GANDIVA_RESUME_FROM=ckpt, GANDIVA_RESUME_WAIT=1,
                  GANDIVA_WORLD_SIZE=2)
    reap(warm)
    page1 = tmp_path / "progress1"
    agent.create_page(page1)
    src = launch(lib_path, 2, None, extra=["--min-step-ms", "3"],
                 GANDIVA_PROGRESS_FILE=page1, GANDIVA_CHECKPOINT_DIR=ckpt,
                 GANDIVA_WORLD_SIZE=2)
    reap(src)
    request_after(page1, src, 15, agent.REQUEST_CHECKPOINT_EXIT)
    status, _, err = finish(src)
    assert status == 75, err
    wait_for(lambda: agent.read_page(page2).state == agent.STATE_WAITING,
             "the warm job to wait")
    assert warm.poll() is None
    agent.mark_ready(ckpt)
    status, stdout, err = finish(warm)
    assert status == 0, err
    assert "resumed from" in stdout and f"done samples={SAMPLES} " in stdout
    info = agent.read_page(page2)
    assert info.restore_end_ns >= info.restore_begin_ns > 0
    migrated = torch.load(out)
    for name, tensor in ref.items():
        assert torch.equal(tensor, migrated[name]), name


def test_periodic_checkpoint_at_world_size_2_lets_a_killed_job_go_on(
        tmp_path, lib_path, reap):
    import os
    import signal
    ref, _ = run_to_end(lib_path, 2, tmp_path / "ref.pt")
    ckpt = tmp_path / "ckpt"
    page1 = tmp_path / "progress1"
    agent.create_page(page1)
    src = launch(lib_path, 2, None, extra=["--min-step-ms", "3"],
                 GANDIVA_PROGRESS_FILE=page1, GANDIVA_CHECKPOINT_DIR=ckpt,
                 GANDIVA_WORLD_SIZE=2, GANDIVA_CHECKPOINT_EVERY_MINIBATCHES=10)
    reap(src)
    note = ckpt / gandiva.SAVED_FILE
    wait_for(lambda: note.exists() and
             note.read_text().startswith("minibatches 20\n") or
             src.poll() is not None, "two periodic checkpoints")
    os.killpg(src.pid, signal.SIGKILL)
    finish(src)
    saved = gandiva.torch.read_checkpoint(str(ckpt))
    assert saved["steps"] >= 20 and saved["steps"] % 10 == 0
    assert saved["world_size"] == 2 and len(saved["rank_rng"]) == 2
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    resumed, stdout = run_to_end(lib_path, 2, tmp_path / "resumed.pt",
                                 GANDIVA_PROGRESS_FILE=page2,
                                 GANDIVA_RESUME_FROM=ckpt,
                                 GANDIVA_WORLD_SIZE=2)
    assert "resumed from" in stdout
    for name, tensor in ref.items():
        assert torch.equal(tensor, resumed[name]), name


def launch_parts(lib_path, sizes, out=None, extra=(), part_env=()):
    """One launcher per part of a multi-server job (as the agents start
    them), all on this machine: part k runs sizes[k] ranks, with
    part_env[k] (if given) added to its environment."""
    from gandiva.launch import free_port
    port = free_port()
    procs, offset = [], 0
    for k, n in enumerate(sizes):
        env = dict(GANDIVA_NNODES=len(sizes), GANDIVA_NODE_RANK=k,
                   GANDIVA_WORLD_SIZE=sum(sizes), GANDIVA_LOCAL_WORLD_SIZE=n,
                   GANDIVA_RANK_OFFSET=offset, GANDIVA_MASTER_ADDR="127.0.0.1",
                   GANDIVA_MASTER_PORT=port)
        if k < len(part_env):
            env.update(part_env[k])
        args = [sys.executable, "-m", "gandiva.launch", "--", str(EXAMPLE),
                "--samples", str(SAMPLES), "--log-every", "0"]
        if out is not None and k == 0:
            args += ["--out", str(out)]
        procs.append(subprocess.Popen(
            args + [str(a) for a in extra], env=child_env(lib_path, **env),
            process_group=0, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
        offset += n
    return procs


def test_a_job_in_two_parts_trains_as_one_launcher_would(tmp_path, lib_path,
                                                         reap):
    ref, _ = run_to_end(lib_path, 3, tmp_path / "ref.pt")
    out = tmp_path / "parts.pt"
    procs = launch_parts(lib_path, [2, 1], out)
    for p in procs:
        reap(p)
    (s0, out0, err0), (s1, _, err1) = [finish(p) for p in procs]
    assert (s0, s1) == (0, 0), err0 + err1
    assert "part 0 of 2: ranks 0..1 of 3" in err0
    assert "part 1 of 2: ranks 2..2 of 3" in err1
    assert "gandiva: 3 ranks over gloo: rank 0 has no GPU" in err0
    assert f"done samples={SAMPLES} " in out0 and "world_size=3" in out0
    parts = torch.load(out)
    for name, tensor in ref.items():
        assert torch.equal(tensor, parts[name]), name


def test_parts_checkpoint_together_and_restart_from_one_copy(tmp_path,
                                                             lib_path, reap):
    """The lead's page asks for a checkpoint: every part exits 75; both
    parts restart from copies of the one checkpoint rank 0 saved and end
    bit-identical to a run never stopped."""
    ref, _ = run_to_end(lib_path, 2, tmp_path / "ref.pt")
    ckpt = tmp_path / "ckpt"
    page = tmp_path / "progress"
    agent.create_page(page)
    procs = launch_parts(lib_path, [1, 1], extra=["--min-step-ms", "3"],
                         part_env=[dict(GANDIVA_PROGRESS_FILE=page,
                                        GANDIVA_CHECKPOINT_DIR=ckpt)])
    for p in procs:
        reap(p)
    request_after(page, procs[0], 15, agent.REQUEST_CHECKPOINT_EXIT)
    statuses = [finish(p) for p in procs]
    assert [s for s, _, _ in statuses] == [75, 75], statuses
    # What the other part's agent receives: a copy, somewhere else.
    copy = tmp_path / "elsewhere"
    shutil.copytree(ckpt, copy)
    out = tmp_path / "restarted.pt"
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    procs = launch_parts(lib_path, [1, 1], out,
                         part_env=[dict(GANDIVA_PROGRESS_FILE=page2,
                                        GANDIVA_RESUME_FROM=ckpt),
                                   dict(GANDIVA_RESUME_FROM=copy)])
    for p in procs:
        reap(p)
    (s0, out0, err0), (s1, _, err1) = [finish(p) for p in procs]
    assert (s0, s1) == (0, 0), err0 + err1
    assert "resumed from" in out0 and f"done samples={SAMPLES} " in out0
    restarted = torch.load(out)
    for name, tensor in ref.items():
        assert torch.equal(tensor, restarted[name]), name


def test_a_bad_part_variable_is_named(tmp_path, lib_path):
    from gandiva.launch import layout_from_env
    good = dict(GANDIVA_NNODES="2", GANDIVA_NODE_RANK="1",
                GANDIVA_WORLD_SIZE="3", GANDIVA_LOCAL_WORLD_SIZE="1",
                GANDIVA_RANK_OFFSET="2", GANDIVA_MASTER_ADDR="10.0.0.1",
                GANDIVA_MASTER_PORT="29500")
    lay = layout_from_env(good, None)
    assert (lay.nproc, lay.world, lay.offset, lay.addr, lay.port) == \
        (1, 3, 2, "10.0.0.1", 29500)
    for name, value, words in [
            ("GANDIVA_NNODES", "two", "GANDIVA_NNODES='two'"),
            ("GANDIVA_NODE_RANK", "2", "GANDIVA_NODE_RANK=2"),
            ("GANDIVA_RANK_OFFSET", "3", "outside GANDIVA_WORLD_SIZE=3"),
            ("GANDIVA_RANK_OFFSET", "0", "the lead part, and it alone"),
            ("GANDIVA_MASTER_ADDR", "", "GANDIVA_MASTER_ADDR: empty"),
            ("GANDIVA_MASTER_PORT", "0", "GANDIVA_MASTER_PORT=0")]:
        bad = dict(good, **{name: value})
        try:
            layout_from_env(bad, None)
        except ValueError as e:
            assert words in str(e), (name, str(e))
        else:
            raise AssertionError(f"{name}={value!r} accepted")
    # The launcher refuses it with status 2 and the message.
    env = child_env(lib_path, **dict(good, GANDIVA_MASTER_PORT="x"))
    r = subprocess.run([sys.executable, "-m", "gandiva.launch", "--",
                        str(EXAMPLE)], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "GANDIVA_MASTER_PORT='x'" in r.stderr


def test_the_backend_is_nccl_only_when_every_rank_has_a_gpu_of_its_own():
    from gandiva.torch import choose_backend
    a, b = "gpu host-a GPU-1", "gpu host-b GPU-2"
    assert choose_backend([a, b]) == ("nccl", "")
    assert choose_backend([a]) == ("nccl", "")
    backend, why = choose_backend([a, "cpu: no CUDA device visible", b])
    assert backend == "gloo"
    assert why == "rank 1 has no GPU (no CUDA device visible)"
    backend, why = choose_backend([a, b, "gpu host-a GPU-1"])
    assert backend == "gloo"
    assert why.startswith("ranks 0 and 2 share one GPU (device GPU-1 on "
                          "host-a)")
    # One host's device 0 is not another's.
    assert choose_backend(["gpu h1 0", "gpu h2 0"]) == ("nccl", "")
