"""gandiva.torch.Job end to end: a real PyTorch job in a child process,
suspended, resumed, migrated (checkpoint-and-exit, then a restart with
GANDIVA_RESUME_FROM). The test plays the node agent."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gandiva.torch
from gandiva import agent
from conftest import (PYTHON_DIR, child_env, finish, start_child, wait_delivered,
                      wait_for, wait_stopped)

EXAMPLE = PYTHON_DIR.parent / "examples" / "train_cnn.py"


def read_log(path):
    if not Path(path).exists():
        return []
    return Path(path).read_text().split("\n")[:-1]


def test_sigtstp_stops_at_a_boundary_and_sigcont_resumes(tmp_path, lib_path,
                                                         reap):
    page = tmp_path / "progress"
    log = tmp_path / "log"
    hold, release, stop = (tmp_path / n for n in ("hold", "release", "stop"))
    agent.create_page(page)
    env = child_env(lib_path, GANDIVA_JOB_ID="j1", GANDIVA_PROGRESS_FILE=page,
                    GANDIVA_CHECKPOINT_DIR=tmp_path / "ckpt")
    proc = start_child(["--until-file", stop, "--hold-at", "5", "--hold-file",
                        hold, "--release-file", release, "--log", log], env)
    reap(proc)
    wait_for(hold.exists, "the job to reach batch 5")
    info = agent.read_page(page)
    assert info.state == agent.STATE_RUNNING
    assert info.pid == proc.pid
    assert info.minibatches == 5

    # SIGTSTP in the middle of batch 5: noted, served at the next boundary.
    os.kill(proc.pid, signal.SIGTSTP)
    wait_delivered(proc.pid, signal.SIGTSTP)
    assert agent.read_page(page).state == agent.STATE_RUNNING
    release.touch()
    assert wait_stopped(proc.pid) == signal.SIGSTOP

    info = agent.read_page(page)
    assert info.state == agent.STATE_SUSPENDED
    assert info.minibatches == 6
    assert info.suspend_count == 1
    assert info.last_kind == agent.REQUEST_SUSPEND
    assert info.last_result == 0
    assert info.last_latency_ns is not None and info.last_latency_ns >= 0
    lines = read_log(log)
    assert lines[-3:] == ["begin 5", "end 5", "offload"], lines[-5:]
    print(f"suspend latency (signal during a held batch): "
          f"{info.last_latency_ns / 1e6:.3f} ms")

    os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: agent.read_page(page).minibatches >= 9, "progress")
    stop.touch()
    status, out, err = finish(proc)
    assert status == 0, err
    info = agent.read_page(page)
    assert info.state == agent.STATE_EXITED
    assert info.exit_code == 0
    assert info.suspend_count == 1
    lines = read_log(log)
    ends = [l for l in lines if l.startswith("end ")]
    # Exact count: every trained batch is one boundary, numbered in order.
    assert ends == [f"end {i}" for i in range(len(ends))]
    assert info.minibatches == len(ends)
    assert f"steps {len(ends)} minibatches {len(ends)}" in out
    assert lines.count("offload") == 1 and lines.count("reload") == 1
    assert lines.index("reload") == lines.index("offload") + 1
    assert lines[lines.index("reload") + 1] == "begin 6"


def test_page_request_suspends_without_a_signal(tmp_path, lib_path, reap):
    page = tmp_path / "progress"
    stop = tmp_path / "stop"
    log = tmp_path / "log"
    agent.create_page(page)
    env = child_env(lib_path, GANDIVA_PROGRESS_FILE=page)
    proc = start_child(["--until-file", stop, "--log", log,
                        "--batch-sleep", "0.002"], env)
    reap(proc)
    wait_for(lambda: agent.read_page(page).minibatches >= 3, "progress")
    seq = agent.request(page, agent.REQUEST_SUSPEND)
    wait_stopped(proc.pid)
    info = agent.read_page(page)
    assert info.state == agent.STATE_SUSPENDED
    assert info.done_seq == seq
    assert read_log(log)[-1] == "offload"
    assert read_log(log)[-2] == f"end {info.minibatches - 1}"
    os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: agent.read_page(page).minibatches >= info.minibatches + 2,
             "progress after resume")
    stop.touch()
    status, _, err = finish(proc)
    assert status == 0, err
    assert agent.read_page(page).suspend_count == 1


def run_to_end(tmp_path, lib_path, name, steps, seed, **env):
    out = tmp_path / f"{name}.pt"
    proc = start_child(["--steps", steps, "--seed", seed, "--out", out],
                       child_env(lib_path, **env))
    status, stdout, err = finish(proc)
    assert status == 0, err
    return torch.load(out), stdout


@pytest.mark.parametrize("hold_at", [8, 14])  # mid-epoch; last batch of one
def test_migration_resumes_with_identical_parameters(tmp_path, lib_path, reap,
                                                     hold_at):
    steps, seed = 30, 7
    # The reference: the same job, never interrupted, outside gandiva.
    ref, _ = run_to_end(tmp_path, lib_path, "ref", steps, seed)
    assert ref["steps"] == steps

    # Run 1: checkpoint-and-exit requested while batch `hold_at` trains.
    page = tmp_path / "progress1"
    ckpt = tmp_path / "ckpt"
    hold, release = tmp_path / "hold", tmp_path / "release"
    agent.create_page(page)
    proc = start_child(
        ["--steps", steps, "--seed", seed, "--hold-at", hold_at,
         "--hold-file", hold, "--release-file", release],
        child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                  GANDIVA_CHECKPOINT_DIR=ckpt))
    reap(proc)
    wait_for(hold.exists, "the job to reach the hold")
    seq = agent.request(page, agent.REQUEST_CHECKPOINT_EXIT)
    os.kill(proc.pid, signal.SIGUSR1)
    release.touch()
    status, out, err = finish(proc)
    assert status == 75, err
    info = agent.read_page(page)
    assert info.state == agent.STATE_EXITED
    assert info.exit_code == 75
    assert info.done_seq == seq
    assert info.last_result == 0
    assert info.minibatches == hold_at + 1
    assert sorted(os.listdir(ckpt)) == ["checkpoint.gdv"]  # no temp file left
    saved = gandiva.torch.read_checkpoint(str(ckpt))
    assert saved["steps"] == hold_at + 1

    # Run 2: a new process (a new page, as on another server) resumes.
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    resumed, _ = run_to_end(tmp_path, lib_path, "resumed", steps, seed,
                            GANDIVA_PROGRESS_FILE=page2,
                            GANDIVA_RESUME_FROM=ckpt)
    assert resumed["steps"] == steps
    assert agent.read_page(page2).minibatches == steps  # counting went on
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert torch.equal(ref["rng_sample"], resumed["rng_sample"])


def test_periodic_checkpoint_lets_a_killed_job_go_on(tmp_path, lib_path,
                                                     reap):
    steps, seed, every, hold_at = 30, 7, 5, 13
    ref, _ = run_to_end(tmp_path, lib_path, "ref", steps, seed)

    # Run 1: saves every 5 mini-batches by itself; SIGKILLed during batch 13.
    page = tmp_path / "progress1"
    ckpt = tmp_path / "ckpt"
    hold, release = tmp_path / "hold", tmp_path / "release"
    agent.create_page(page)
    proc = start_child(
        ["--steps", steps, "--seed", seed, "--hold-at", hold_at,
         "--hold-file", hold, "--release-file", release],
        child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                  GANDIVA_CHECKPOINT_DIR=ckpt,
                  GANDIVA_CHECKPOINT_EVERY_MINIBATCHES=every))
    reap(proc)
    wait_for(hold.exists, "the job to reach the hold")
    assert sorted(os.listdir(ckpt)) == [gandiva.SAVED_FILE, "checkpoint.gdv"]
    note = (ckpt / gandiva.SAVED_FILE).read_text().split("\n")
    assert note == ["minibatches 10", "path checkpoint.gdv",
                    f"mtime_ns {os.stat(ckpt / 'checkpoint.gdv').st_mtime_ns}",
                    ""]
    os.kill(proc.pid, signal.SIGKILL)
    status, _, _ = finish(proc)
    assert status == -signal.SIGKILL
    assert gandiva.torch.read_checkpoint(str(ckpt))["steps"] == 10

    # Run 2 goes on from it: the parameters of a run never interrupted.
    page2 = tmp_path / "progress2"
    agent.create_page(page2)
    resumed, _ = run_to_end(tmp_path, lib_path, "resumed", steps, seed,
                            GANDIVA_PROGRESS_FILE=page2,
                            GANDIVA_RESUME_FROM=ckpt)
    assert resumed["steps"] == steps
    for name, tensor in ref["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert torch.equal(ref["rng_sample"], resumed["rng_sample"])


def test_periodic_checkpoint_by_time(tmp_path, lib_path, reap):
    page = tmp_path / "progress"
    ckpt = tmp_path / "ckpt"
    agent.create_page(page)
    proc = start_child(
        ["--steps", 1000000, "--batch-sleep", 0.02],
        child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                  GANDIVA_CHECKPOINT_DIR=ckpt,
                  GANDIVA_CHECKPOINT_EVERY_S=0.3))
    reap(proc)
    note = ckpt / gandiva.SAVED_FILE

    def saved_at():
        try:
            return int(note.read_text().split("\n")[0].split()[1])
        except (OSError, IndexError, ValueError):
            return 0
    wait_for(lambda: saved_at() > 0, "a first periodic checkpoint")
    first = saved_at()
    wait_for(lambda: saved_at() > first, "a second one")
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc)
    saved = gandiva.torch.read_checkpoint(str(ckpt))
    assert saved["steps"] == saved_at()


def test_periodic_checkpoint_settings_read_from_the_environment(monkeypatch):
    for name in ("GANDIVA_CHECKPOINT_EVERY_MINIBATCHES",
                 "GANDIVA_CHECKPOINT_EVERY_S"):
        monkeypatch.delenv(name, raising=False)
    assert gandiva.checkpoint_every() == (None, None)
    monkeypatch.setenv("GANDIVA_CHECKPOINT_EVERY_S", "90.5")
    assert gandiva.checkpoint_every() == (None, 90.5)
    monkeypatch.setenv("GANDIVA_CHECKPOINT_EVERY_MINIBATCHES", "500")
    assert gandiva.checkpoint_every() == (500, None)
    monkeypatch.setenv("GANDIVA_CHECKPOINT_EVERY_MINIBATCHES", "lots")
    monkeypatch.setenv("GANDIVA_CHECKPOINT_EVERY_S", "-1")
    assert gandiva.checkpoint_every() == (None, None)


def test_resize_exits_76(tmp_path, lib_path, reap):
    page = tmp_path / "progress"
    ckpt = tmp_path / "ckpt"
    hold, release = tmp_path / "hold", tmp_path / "release"
    agent.create_page(page)
    proc = start_child(["--steps", 20, "--hold-at", 3, "--hold-file", hold,
                        "--release-file", release],
                       child_env(lib_path, GANDIVA_PROGRESS_FILE=page,
                                 GANDIVA_CHECKPOINT_DIR=ckpt))
    reap(proc)
    wait_for(hold.exists, "the job to reach the hold")
    agent.request(page, agent.REQUEST_RESIZE, 2)
    release.touch()
    status, _, err = finish(proc)
    assert status == 76, err
    info = agent.read_page(page)
    assert info.target_world_size == 2
    assert (ckpt / "checkpoint.gdv").exists()


def test_example_runs_standalone(tmp_path):
    env = child_env(None, GANDIVA_CLIENT_LIB=tmp_path / "missing.so")
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "4"],
                          env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "done: 4 steps" in proc.stdout
