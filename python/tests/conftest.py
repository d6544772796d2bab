"""Shared helpers for the gandiva Python tests.

The tests play the node agent: they create a progress page, start a training
job in a child process (its own process group, like the agent does), signal
it and read the page. Waits are bounded (WAIT seconds) only as a failure
guard; nothing asserts on timing.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PYTHON_DIR))

import gandiva._lib  # noqa: E402

WAIT = 60.0  # seconds; importing torch in a child takes a few on a busy box
CHILD = Path(__file__).resolve().parent / "child_train.py"


def find_lib():
    for path in gandiva._lib.candidate_paths():
        if path.is_file():
            return path
    return None


@pytest.fixture
def lib_path():
    path = find_lib()
    if path is None:
        pytest.skip("libgandiva_client.so not built (set GANDIVA_CLIENT_LIB)")
    return path


def child_env(lib_path, **gandiva_env):
    """The environment of a job: the parent's minus any GANDIVA_*, plus
    `gandiva_env` (e.g. GANDIVA_PROGRESS_FILE=...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GANDIVA_")}
    if lib_path is not None:
        env["GANDIVA_CLIENT_LIB"] = str(lib_path)
    env["PYTHONPATH"] = str(PYTHON_DIR)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in gandiva_env.items()})
    return env


def start_child(args, env):
    """Starts child_train.py in its own process group (setpgid, not setsid:
    a job in an orphaned process group ignores SIGTSTP)."""
    return subprocess.Popen([sys.executable, str(CHILD)] + [str(a) for a in args],
                            env=env, process_group=0,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(pred, what):
    deadline = time.monotonic() + WAIT
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def wait_stopped(pid):
    """Waits until the child is stopped (waitpid WUNTRACED)."""
    result = {}

    def stopped():
        wpid, status = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
        if wpid == pid:
            result["status"] = status
            return True
        return False

    wait_for(stopped, "the job to stop")
    status = result["status"]
    assert os.WIFSTOPPED(status), status
    return os.WSTOPSIG(status)


def pending_signals(pid):
    mask = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")):
                mask |= int(line.split()[1], 16)
    return mask


def wait_delivered(pid, signo):
    """After os.kill: waits until the signal left the pending set."""
    bit = 1 << (signo - 1)
    wait_for(lambda: pending_signals(pid) & bit == 0,
             f"signal {signo} to be delivered")


def finish(proc):
    """Waits for the child to exit; returns (status, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"job did not exit\nstdout:{out}\nstderr:{err}")
    return proc.returncode, out, err


@pytest.fixture
def reap():
    """Kills children a failed test left behind."""
    procs = []
    yield procs.append
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
