"""The Python layer over the C ABI: library lookup, no-op mode, page helpers."""

import pytest

import gandiva
import gandiva._lib as _lib
from gandiva import agent


@pytest.fixture
def fresh_lib(monkeypatch):
    """Lets a test load the library anew; restores the loaded one after."""
    saved = _lib._lib
    _lib._lib = None
    yield monkeypatch
    _lib._lib = saved


def test_missing_library_is_a_clear_error_inside_gandiva(fresh_lib, tmp_path):
    fresh_lib.setenv("GANDIVA_CLIENT_LIB", str(tmp_path / "nope.so"))
    fresh_lib.setattr(_lib, "candidate_paths",
                      lambda: [tmp_path / "nope.so", tmp_path / "also.so"])
    fresh_lib.setenv("GANDIVA_PROGRESS_FILE", str(tmp_path / "page"))
    with pytest.raises(ImportError) as e:
        gandiva.init()
    assert isinstance(e.value, gandiva.LibraryNotFoundError)
    assert str(tmp_path / "nope.so") in str(e.value)
    assert str(tmp_path / "also.so") in str(e.value)


def test_missing_library_is_a_no_op_outside_gandiva(fresh_lib, tmp_path):
    fresh_lib.setattr(_lib, "candidate_paths", lambda: [tmp_path / "nope.so"])
    fresh_lib.delenv("GANDIVA_PROGRESS_FILE", raising=False)
    fresh_lib.setenv("GANDIVA_CHECKPOINT_DIR", str(tmp_path))
    assert gandiva.init() == gandiva.INACTIVE
    assert not gandiva.active()
    for _ in range(5):
        assert gandiva.step() == gandiva.STEP_CONTINUE
    assert gandiva.minibatches() == 5
    assert gandiva.checkpoint_dir() == str(tmp_path)
    assert gandiva.resume_from() is None
    gandiva.set_hooks(offload=lambda: None, reload=lambda: None)
    gandiva.shutdown()


def test_real_library_without_page_is_a_no_op(fresh_lib, lib_path):
    fresh_lib.setenv("GANDIVA_CLIENT_LIB", str(lib_path))
    fresh_lib.delenv("GANDIVA_PROGRESS_FILE", raising=False)
    lib = _lib.load()
    assert not getattr(lib, "is_noop", False)
    assert gandiva.init() == gandiva.INACTIVE
    before = gandiva.minibatches()
    assert gandiva.step() == gandiva.STEP_CONTINUE
    assert gandiva.minibatches() == before + 1
    assert gandiva.strerror(gandiva.E_HOOK) == "GANDIVA_E_HOOK"
    gandiva.shutdown()


def test_page_helpers_round_trip(fresh_lib, lib_path, tmp_path):
    fresh_lib.setenv("GANDIVA_CLIENT_LIB", str(lib_path))
    page = tmp_path / "progress"
    agent.create_page(page)
    info = agent.read_page(page)
    assert info.version[0] == 1
    assert info.state == agent.STATE_NEW
    assert info.state_name == "new"
    assert info.rate is None
    assert agent.request(page, agent.REQUEST_SUSPEND) == 1
    assert agent.request(page, agent.REQUEST_RESIZE, 4) == 2
    assert agent.read_page(page).request_seq == 2
    with pytest.raises(gandiva.GandivaError):
        agent.request(page, 42)
    with pytest.raises(gandiva.GandivaError):
        agent.read_page(tmp_path / "absent")
    assert agent.monotonic_ns() > 0


def test_a_reported_metric_reaches_the_page(fresh_lib, lib_path, tmp_path):
    fresh_lib.setenv("GANDIVA_CLIENT_LIB", str(lib_path))
    fresh_lib.delenv("GANDIVA_PROGRESS_FILE", raising=False)
    assert gandiva.report_metric(1.0) is False  # outside gandiva
    page = tmp_path / "progress"
    agent.create_page(page)
    assert agent.read_metric(page) is None
    fresh_lib.setenv("GANDIVA_PROGRESS_FILE", str(page))
    fresh_lib.delenv("GANDIVA_RESUME_FROM", raising=False)
    assert gandiva.init() == 0
    try:
        for _ in range(3):
            gandiva.step()
        at = gandiva.minibatches()  # counts on from earlier tests' steps
        assert gandiva.report_metric(0.5) is True
        assert agent.read_metric(page) == (0.5, at)
        gandiva.step()
        assert gandiva.report_metric(0.25) is True
        assert agent.read_metric(page) == (0.25, at + 1)
    finally:
        gandiva.shutdown()
    with pytest.raises(gandiva.GandivaError):
        agent.read_metric(tmp_path / "absent")


def test_report_metric_is_a_no_op_without_the_library(fresh_lib, tmp_path):
    fresh_lib.setattr(_lib, "candidate_paths", lambda: [tmp_path / "nope.so"])
    fresh_lib.delenv("GANDIVA_PROGRESS_FILE", raising=False)
    assert gandiva.init() == gandiva.INACTIVE
    assert gandiva.report_metric(2.0) is False
