"""gandiva.search against a stand-in for the gandiva command
(fake_gandiva.py): successive halving, its output, and its usage errors."""

import json
import sys
from pathlib import Path

import pytest

from gandiva import search

FAKE = Path(__file__).resolve().parent / "fake_gandiva.py"


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_GANDIVA_STATE", str(tmp_path / "state.json"))
    wrapper = tmp_path / "gandiva"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def state(tmp_path):
    return json.loads((tmp_path / "state.json").read_text())


def spec(tmp_path, text="name: t\ncommand: python3 train.py --lr {lr}\n"
                        "gpus: 1\n"):
    p = tmp_path / "search.yaml"
    p.write_text(text)
    return p


def test_halving_keeps_the_best_and_stops_the_rest(cluster, tmp_path,
                                                   capsys):
    out_json = tmp_path / "trials.json"
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.1,0.2,0.35,0.5",
                      "--rungs", "100,200", "--keep", "0.5", "--poll-s", "0",
                      "--gandiva", str(cluster), "--json", str(out_json),
                      "--scheduler", "h:1,h:2"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    st = state(tmp_path)
    jobs = {j["id"]: j for j in st["jobs"]}
    # Four jobs, named after the spec, each with its value and the spec's
    # directory as its workdir.
    assert sorted(j["name"] for j in jobs.values()) == [
        "search-1", "search-2", "search-3", "search-4"]
    assert "--lr 0.35" in jobs[3]["spec"]
    assert f"workdir: {tmp_path}" in jobs[3]["spec"]
    # The worse half went at the first rung (0.35 and 0.5), the best of the
    # rest is 0.2.
    assert jobs[3]["state"] == "KILLED" and jobs[4]["state"] == "KILLED"
    assert jobs[1]["state"] != "KILLED" and jobs[2]["state"] != "KILLED"
    kills = [c for c in st["calls"] if c[0] == "kill"]
    assert sorted(c[1] for c in kills) == ["3", "4"]
    # Every call went to the scheduler given.
    assert all(c[-2:] == ["--scheduler", "h:1,h:2"] for c in st["calls"])
    assert "best: job 2 (lr=0.2)" in printed
    trials = json.loads(out_json.read_text())
    assert [t["params"]["lr"] for t in trials] == ["0.2", "0.1", "0.35", "0.5"]
    assert trials[0]["out"] is None
    assert trials[2]["out"] == "stopped at rung 100"
    assert len(trials[0]["rungs"]) == 2 and len(trials[2]["rungs"]) == 1
    # At each rung, a metric reported at or past the budget.
    assert trials[0]["rungs"][0] == pytest.approx(0 + 1 / 101)


def test_jobs_the_scheduler_archived_are_read_with_show(cluster, tmp_path,
                                                       capsys, monkeypatch):
    # A job archived as it ends is never listed ended (gandiva-scheduler
    # --keep-ended-jobs): the search reads it with `show`, and decides as it
    # would otherwise.
    monkeypatch.setenv("FAKE_GANDIVA_ARCHIVE", "1")
    other = tmp_path / "other.yaml"
    other.write_text("name: other\ncommand: python3 x.py --lr 0.3\n")
    assert search.Cluster(str(cluster), []).submit([str(other)]) == [1]
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.15,0.2,0.5",
                      "--rungs", "100,300", "--keep", "0.7", "--poll-s", "0",
                      "--name", "s[1]", "--timeout-s", "30",
                      "--gandiva", str(cluster)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "failed at mini-batch 150" in printed
    assert "best: job 3 (lr=0.2)" in printed
    calls = state(tmp_path)["calls"]
    # Only the search's jobs were listed (its name's pattern characters
    # matched as themselves), and the ended ones were shown.
    lists = [c for c in calls if c[0] == "ls"]
    assert lists and all(c[c.index("--name") + 1] == "s[[]1]-*" for c in lists)
    shown = [c[1] for c in calls if c[0] == "show"]
    assert "2" in shown and "1" not in shown
    # Each once: a trial seen ended is not read again.
    assert sorted(shown) == sorted(set(shown)), shown


def test_a_job_without_a_metric_leaves_the_search(cluster, tmp_path, capsys):
    # lr >= 1 reports no metric in the stand-in; it finishes without one.
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.2,1.5",
                      "--rungs", "450", "--poll-s", "0",
                      "--gandiva", str(cluster)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "finished without a metric" in printed
    assert "best: job 1 (lr=0.2)" in printed


def test_a_job_that_fails_cannot_win(cluster, tmp_path, capsys):
    # lr 0.15 leads at the first rung, then fails before the second.
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.15,0.2,0.5",
                      "--rungs", "100,300", "--keep", "0.7", "--poll-s", "0",
                      "--gandiva", str(cluster)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "rung 100 mini-batches: 1=" in printed  # it led
    assert "failed at mini-batch 150" in printed
    assert "best: job 2 (lr=0.2)" in printed


def test_a_search_is_submitted_all_at_once_or_not_at_all(cluster, tmp_path,
                                                        capsys):
    # The second configuration's spec is refused: no job starts.
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.1,0.666,0.3",
                      "--rungs", "100", "--gandiva", str(cluster)])
    captured = capsys.readouterr()
    assert rc == 2
    assert "field 'command': bad" in captured.err
    st = state(tmp_path)
    assert st["jobs"] == []
    # One submission, of the three specs.
    submits = [c for c in st["calls"] if c[0] == "submit"]
    assert len(submits) == 1 and len(submits[0]) == 4


def test_a_timeout_kills_the_jobs_still_in_the_search(cluster, tmp_path,
                                                      capsys):
    rc = search.main([str(spec(tmp_path)), "--param", "lr=0.1,0.2",
                      "--rungs", "100", "--timeout-s", "0", "--poll-s", "0",
                      "--gandiva", str(cluster)])
    captured = capsys.readouterr()
    assert rc == 2
    assert "timed out" in captured.err
    assert [j["state"] for j in state(tmp_path)["jobs"]] == ["KILLED"] * 2


def test_configurations_grid_samples_and_ranges():
    grid = search.configurations(search.parse_params(
        ["lr=0.1,0.2", "bs=16,32,64"]))
    assert len(grid) == 6 and grid[0] == {"lr": "0.1", "bs": "16"}
    # Drawn from the grid: no repeats, the same for the same seed.
    params = search.parse_params(["lr=0.1,0.2", "bs=16,32,64"])
    a = search.configurations(params, samples=4, seed=7)
    assert len(a) == 4 and len({tuple(c.items()) for c in a}) == 4
    assert a == search.configurations(params, samples=4, seed=7)
    assert len(search.configurations(params, samples=99)) == 6
    # A log range: every draw within it, spread over its decades.
    ranged = search.parse_params(["lr=log:0.001:1", "opt=sgd,adam"])
    draws = search.configurations(ranged, samples=200, seed=1)
    values = [float(c["lr"]) for c in draws]
    assert all(0.001 <= v <= 1 for v in values)
    assert min(values) < 0.01 and max(values) > 0.1
    assert {c["opt"] for c in draws} == {"sgd", "adam"}
    uniform = search.configurations(
        search.parse_params(["m=uniform:0.5:0.9"]), samples=50, seed=2)
    assert all(0.5 <= float(c["m"]) <= 0.9 for c in uniform)


def test_samples_from_a_range_run_as_jobs(cluster, tmp_path, capsys):
    rc = search.main([str(spec(tmp_path)), "--param", "lr=log:0.01:0.9",
                      "--samples", "3", "--seed", "5", "--rungs", "100",
                      "--poll-s", "0", "--gandiva", str(cluster)])
    assert rc == 0, capsys.readouterr().out
    jobs = state(tmp_path)["jobs"]
    assert len(jobs) == 3
    assert all(0.01 <= j["lr"] <= 0.9 for j in jobs)


def test_hyperband_brackets_follow_the_paper():
    # R = 900, smallest rung 100, eta = 3: s_max = 2.
    assert search.hyperband_brackets(900, 100, 3) == [
        (9, [100, 300, 900]), (5, [300, 900]), (3, [900])]
    assert search.hyperband_brackets(400, 100, 2) == [
        (4, [100, 200, 400]), (3, [200, 400]), (3, [400])]
    assert search.hyperband_brackets(50, 50, 3) == [(1, [50])]


def test_hyperband_runs_each_bracket_and_picks_the_best(cluster, tmp_path,
                                                        capsys):
    out_json = tmp_path / "trials.json"
    rc = search.main([str(spec(tmp_path)), "--param", "lr=log:0.05:0.8",
                      "--hyperband", "400", "--min-budget", "100", "--eta",
                      "2", "--seed", "3", "--poll-s", "0", "--gandiva",
                      str(cluster), "--json", str(out_json)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    names = sorted(j["name"] for j in state(tmp_path)["jobs"])
    assert len(names) == 10  # 4 + 3 + 3
    assert sum(n.startswith("search-b1-") for n in names) == 4
    assert sum(n.startswith("search-b3-") for n in names) == 3
    assert "bracket 1 of 3: 4 configurations, rungs 100,200,400" in printed
    trials = json.loads(out_json.read_text())
    survivors = [t for t in trials if t["out"] is None]
    assert len(survivors) == 1 + 1 + 3  # halved to one in brackets 1 and 2
    # The winner is the survivor whose lr is nearest 0.2 (the stand-in's
    # best), first in the output.
    nearest = min(survivors, key=lambda t: abs(float(t["params"]["lr"]) - 0.2))
    assert trials[0] == nearest
    assert f"best: job {nearest['job']} " in printed


@pytest.mark.parametrize("args,message", [
    (["--param", "lr=0.1", "--rungs", "0,10"], "--rungs"),
    (["--param", "lr=0.1", "--rungs", "20,10"], "--rungs"),
    (["--param", "momentum=0.9", "--rungs", "10"], "the spec has no {momentum}"),
    (["--param", "lr", "--rungs", "10"], "expected NAME=V1"),
    (["--param", "lr=0.1", "--param", "lr=0.2", "--rungs", "10"], "twice"),
    (["--rungs", "10"], "give at least one"),
    (["--param", "lr=0.1", "--rungs", "10", "--keep", "1"], "--keep"),
    (["--param", "lr=log:0.1:1", "--rungs", "10"], "a range needs --samples"),
    (["--param", "lr=log:0:1", "--samples", "2", "--rungs", "10"], "LO > 0"),
    (["--param", "lr=uniform:2:1", "--samples", "2", "--rungs", "10"],
     "LO < HI"),
    (["--param", "lr=log:a:b", "--samples", "2", "--rungs", "10"],
     "with numbers"),
    (["--param", "lr=0.1", "--samples", "0", "--rungs", "10"], "--samples"),
    (["--param", "lr=0.1", "--hyperband", "100", "--eta", "1"], "--eta"),
    (["--param", "lr=0.1", "--hyperband", "100", "--min-budget", "200"],
     "--min-budget"),
    (["--param", "lr=0.1", "--hyperband", "100", "--samples", "3"],
     "--samples"),
    (["--param", "lr=0.1", "--rungs", "10", "--min-budget", "5"],
     "only with --hyperband"),
])
def test_usage_errors_name_the_flag(cluster, tmp_path, capsys, args, message):
    rc = search.main([str(spec(tmp_path)), *args, "--gandiva", str(cluster)])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_a_refused_submission_says_why(cluster, tmp_path, capsys):
    p = spec(tmp_path, "name: t\ncommand: FAIL --lr {lr}\n")
    rc = search.main([str(p), "--param", "lr=0.1", "--rungs", "10",
                      "--gandiva", str(cluster)])
    assert rc == 2
    assert "field 'command': bad" in capsys.readouterr().err
