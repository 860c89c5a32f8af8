"""`harnevo tune` end to end with sim/bounded on a few short generated games: it finishes, prunes at least one
trial, exports the best as a harness YAML; optuna.load_study opens the study from the run folder's SQLite file;
the same seed gives the same trials; a re-run with more trials (and `resume`) adds trials without replaying
an episode. Plus the config and search-space units."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ARGS = ["--model", "sim/bounded", "--split", "generated", "--games", "4", "--max-steps", "10", "--minibatch", "2",
        "--race-step", "1", "--workers", "2", "--concurrency", "4", "--seed", "0"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harnevo.cli", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tune-games")
    r = _cli("data", "generate", "--out", str(out), "--games", "4", "--seed", "0", "--workers", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def tuned(games, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tune") / "t1"
    r = _cli("tune", "bpe_always_on", *ARGS, "--data", str(games), "--trials", "12", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir, r


def _study(run_dir: Path):
    import optuna

    return optuna.load_study(study_name="harnevo-tune", storage=f"sqlite:///{run_dir / 'population.sqlite'}")


def test_tune_finishes_prunes_and_exports_the_best(tuned):
    from optuna.trial import TrialState

    from harnevo.harness.spec import load_harness

    run_dir, r = tuned
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["sampler"] == "TPE" and len(summary["trials"]) == 12
    assert summary["pruned"] >= 1 and summary["complete"] >= 1
    best = load_harness(str(run_dir / "best.yaml"))
    assert best.behaviour_id == summary["best"]["behaviour_id"]
    assert best.budget.max_steps <= 10
    assert "best: trial" in r.stdout and "optuna-dashboard sqlite:///" in r.stdout
    study = _study(run_dir)  # the study opens from the run folder's SQLite file
    states = [t.state for t in study.trials]
    assert len(states) == 12 and TrialState.PRUNED in states
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert all(t.intermediate_values for t in pruned)  # pruned at a racing checkpoint, with its success so far
    assert study.trials[0].user_attrs.get("start")
    assert study.trials[summary["best_trial"]].value == study.best_value  # the best success (then fewest tokens)
    from harnevo.population.store import Store  # the store is intact beside Optuna's tables

    store = Store.open(run_dir)
    assert store.integrity_ok() and store.episode_count() == summary["episodes_in_store"]
    store.close()


def test_same_seed_same_trials(tuned, games, tmp_path):
    run_dir, _ = tuned
    r = _cli("tune", "bpe_always_on", *ARGS, "--data", str(games), "--trials", "4", "--run-dir", str(tmp_path / "t2"))
    assert r.returncode == 0, r.stderr[-3000:]
    first = [t.params for t in _study(run_dir).trials[:4]]
    assert [t.params for t in _study(tmp_path / "t2").trials] == first


def test_more_trials_and_resume_continue_without_replaying(tuned, games):
    run_dir, _ = tuned
    before = _study(run_dir)
    old = [(t.number, t.params, t.state) for t in before.trials]
    r = _cli("tune", "bpe_always_on", *ARGS, "--data", str(games), "--trials", "14", "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    after = _study(run_dir)
    assert len(after.trials) == 14 and [(t.number, t.params, t.state) for t in after.trials[:12]] == old
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes_added_now"] == summary["episodes_played_now"]  # nothing played twice
    r = _cli("resume", str(run_dir))  # the recorded budget (14) is reached: nothing to play
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["episodes_played_now"] == 0 and len(_study(run_dir).trials) == 14


def test_bad_settings_are_one_line(tmp_path):
    r = _cli("tune", "bpe_always_on", "--objectives", "success,meta", "--run-dir", str(tmp_path / "x"))
    assert r.returncode == 2 and "objectives" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = _cli("tune", "no_such_harness", "--run-dir", str(tmp_path / "y"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "y").exists()


def test_search_space_covers_live_numeric_and_categorical_genes():
    from harnevo.evolve.tune import search_space, start_params, trial_harness
    from harnevo.harness.genome import normalize
    from harnevo.harness.spec import load_harness

    h = normalize(load_harness("bpe_always_on"))
    space = search_space(h, max_steps=10)
    assert "mode" not in space and space["budget.max_steps"].high == 10
    assert {"memory.history_window", "model.temperature", "guard"} <= set(space)
    assert all(not k.startswith("prompt.") for k in space)
    start = start_params(h, space)
    assert trial_harness(h, start, 0).behaviour_id == normalize(h.evolve(budget={"max_steps": 10})).behaviour_id
