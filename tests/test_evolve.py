"""`harnevo evolve` end to end on a few official games with the simulated agent: a short run finishes with
a front and best.yaml; it resumes after SIGKILL at three random moments to exactly the uninterrupted run;
`apply RUN:best` works; bad input is one line and exit 2; a second process on the run exits 2."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

SMALL = ["--model", "sim/bounded", "--seeds", "react,bpe_always_on", "--split", "valid_train", "--games", "6",
         "--population", "4", "--generations", "2", "--minibatch", "3", "--max-steps", "20", "--seed", "3",
         "--concurrency", "4", "--workers", "2"]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harnevo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _final_state(run_dir: Path) -> dict:
    db = sqlite3.connect(run_dir / "population.sqlite")
    try:
        from harnevo.population.store import Store

        store = Store.open(run_dir)
        last = store.last_generation()
        gens = store.generations()
        state = {"generation": last["generation"], "population": last["population"], "front": last["front"],
                 "fitness": {b: (s["success"], s["games"], s["tokens_per_episode"])
                             for b, s in last["stats"]["candidates"].items() if b in last["population"]},
                 "episodes": store.episode_count(), "generations": [g["population"] for g in gens],
                 "integrity": store.integrity_ok()}
        store.close()
        return state
    finally:
        db.close()


@pytest.fixture(scope="module")
def uninterrupted(alfworld_data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("evo") / "r1"
    r = _cli("evolve", *SMALL, "--data", str(alfworld_data), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir, r


def test_a_short_run_ends_with_a_front_and_best_yaml(uninterrupted):
    run_dir, r = uninterrupted
    state = _final_state(run_dir)
    assert state["generation"] == 2 and len(state["population"]) == 4 and state["integrity"]
    assert state["front"] and set(state["front"]) <= set(state["population"])
    assert (run_dir / "best.yaml").is_file() and "best" in r.stdout and "apply it" in r.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best"] in state["front"] and summary["simulated"] is True
    assert summary["episodes_in_store"] == state["episodes"] > 0
    # the store records every candidate's lineage back to a seed
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    rows = store.harness_rows()
    assert {r["operator"] for r in rows if not r["parents"]} == {"seed"}
    assert all(r["parents"] for r in rows if r["generation"] > 0)
    store.close()


def test_sigkill_at_three_random_moments_then_resume_equals_uninterrupted(uninterrupted, alfworld_data, tmp_path):
    ref = _final_state(uninterrupted[0])
    run_dir = tmp_path / "killed"
    args = [sys.executable, "-m", "harnevo.cli", "evolve", *SMALL, "--data", str(alfworld_data),
            "--run-dir", str(run_dir)]
    rng = random.Random(2026)
    target = ref["episodes"]
    kills = 0
    for frac in sorted(rng.uniform(0.15, 0.9) for _ in range(3)):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        db = run_dir / "population.sqlite"
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if db.is_file():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as c:
                        n = c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
                    if n >= frac * target:
                        break
                except sqlite3.Error:
                    pass
            time.sleep(0.05)
        assert proc.poll() is None, "the run must be killed mid-way, not after it ended"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    assert kills == 3 and not (run_dir / "best.yaml").exists()  # no kill landed after the end
    r = _cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    got = _final_state(run_dir)
    assert got == ref


def test_apply_the_best_of_a_run(uninterrupted, alfworld_data, tmp_path):
    run_dir, _ = uninterrupted
    r = _cli("apply", f"{run_dir}:best", "--model", "sim/bounded", "--split", "valid_unseen", "--games", "2",
             "--data", str(alfworld_data), "--out", str(tmp_path / "held_out"))
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((tmp_path / "held_out" / "summary.json").read_text())
    assert s["behaviour_id"] == json.loads((run_dir / "summary.json").read_text())["best"]
    assert s["games"] == 2


def test_bad_input_is_one_line_and_exit_2(uninterrupted, alfworld_data, tmp_path):
    def one_line(r, needle):
        assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert needle in r.stderr, r.stderr

    one_line(_cli("evolve", "--seeds", "nope", "--run-dir", str(tmp_path / "a"), "--data", str(alfworld_data)),
             "unknown harness 'nope'")
    one_line(_cli("evolve", "--population", "3", "--run-dir", str(tmp_path / "b")), "at least 4")
    one_line(_cli("evolve", "--generations", "2", "--episodes", "10", "--run-dir", str(tmp_path / "c")),
             "exactly one budget knob")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("population: 8\nflavour: sweet\n")
    one_line(_cli("evolve", "--config", str(cfg), "--run-dir", str(tmp_path / "d")), "unknown setting 'flavour'")
    # a run directory that holds another run: refused, nothing overwritten
    run_dir = uninterrupted[0]
    before = (run_dir / "population.sqlite").stat().st_mtime_ns
    one_line(_cli("evolve", *SMALL[:-8], "--seed", "99", "--data", str(alfworld_data), "--run-dir", str(run_dir)),
             "another run")
    assert (run_dir / "population.sqlite").stat().st_mtime_ns == before
    # a second process on a run in use
    from harnevo.files import FolderLock

    with FolderLock(run_dir, "run"):
        one_line(_cli("resume", str(run_dir)), "in use by another harnevo process")
    # a damaged store
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "population.sqlite").write_bytes(b"this is not a database" * 100)
    one_line(_cli("resume", str(broken)), "population.sqlite")


def test_population_commands(uninterrupted, tmp_path):
    run_dir, _ = uninterrupted
    best = json.loads((run_dir / "summary.json").read_text())["best"]
    r = _cli("population", "list", "--run-dir", str(run_dir))
    assert r.returncode == 0 and best in r.stdout and "seed" in r.stdout, r.stderr
    r = _cli("population", "lineage", best, "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert "seed" in lines[0] and best in lines[-1]  # oldest first: from a seed to the best
    r = _cli("population", "show", best[:8], "--run-dir", str(run_dir))
    assert r.returncode == 0 and f"# behaviour_id: {best}" in r.stdout, r.stderr
    out = tmp_path / "exported.yaml"
    r = _cli("population", "export", best, "--run-dir", str(run_dir), "--out", str(out))
    assert r.returncode == 0, r.stderr
    r = _cli("harness", "show", str(out))
    assert r.returncode == 0 and f"# behaviour_id: {best}" in r.stdout, r.stderr


def _small_with_episodes(n: int) -> list[str]:
    """SMALL with an episode budget of `n` in place of its generations."""
    args = [a for a in SMALL]
    i = args.index("--generations")
    del args[i:i + 2]
    return [*args, "--episodes", str(n)]


def test_an_episode_budget_is_never_passed(alfworld_data, tmp_path):
    run_dir = tmp_path / "budget"
    r = _cli("evolve", *_small_with_episodes(20), "--data", str(alfworld_data), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    try:
        assert store.episode_count() == 20  # the seeds alone would play 12; the cap cuts generation 0's mutants
        assert store.last_generation()["generation"] == 0
    finally:
        store.close()
    assert json.loads((run_dir / "summary.json").read_text())["stopped_by_budget"] is True


def test_racing_savings_of_a_generation_the_budget_cuts_count_as_after_a_resume(alfworld_data, tmp_path):
    """SMALL's generation 2 races two of its four candidates out after the minibatch (63 episodes in all, 6 of
    them saved in generation 2): a budget of 62 cuts that generation short. It is not saved, so its savings are
    not counted either: the run reports what its last saved generation holds, as a resumed run does."""
    run_dir = tmp_path / "cut"
    r = _cli("evolve", *_small_with_episodes(62), "--data", str(alfworld_data), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    live = json.loads((run_dir / "summary.json").read_text())
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    try:
        last = store.last_generation()
        assert (last["generation"], store.episode_count()) == (1, 62)
    finally:
        store.close()
    assert live["stopped_by_budget"] is True
    assert live["episodes_saved_by_racing"] == last["stats"]["saved_by_racing"] == 3
    r = _cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["episodes_saved_by_racing"] == live["episodes_saved_by_racing"]
    assert resumed["episodes_in_store"] == live["episodes_in_store"] == 62


def _config_file_run(alfworld_data, tmp_path: Path, config_text: str, name: str, episodes: int = 16):
    """SMALL with an episode budget instead of generations and `config_text` as --config; (run dir, result)."""
    (tmp_path / f"{name}.yaml").write_text(config_text)
    run_dir = tmp_path / name
    r = _cli("evolve", *_small_with_episodes(episodes), "--config", str(tmp_path / f"{name}.yaml"),
             "--data", str(alfworld_data), "--run-dir", str(run_dir))
    return run_dir, r


def _harness_rows_and_config(run_dir: Path) -> tuple[list[dict], dict]:
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    try:
        return store.harness_rows(), store.config()
    finally:
        store.close()


def test_mutation_steps_from_a_config_file_chain_mutations(alfworld_data, tmp_path):
    from harnevo.evolve.config import parse_config

    assert "mutation_steps" not in parse_config({}).to_json()  # runs made before the key keep their config hash
    run_dir, r = _config_file_run(alfworld_data, tmp_path, "mutation_steps: 2\n", "chained")
    assert r.returncode == 0, r.stderr[-3000:]
    rows, config = _harness_rows_and_config(run_dir)
    mutants = [row for row in rows if row["parents"]]
    assert mutants and all(len(row["operator"].split("+")) >= 2 for row in mutants)
    assert config["mutation_steps"] == 2


def test_init_random_fills_generation_zero_as_random_search_draws(alfworld_data, tmp_path):
    from harnevo.evolve.config import parse_config

    assert "init" not in parse_config({}).to_json()  # runs made before the key keep their config hash
    run_dir, r = _config_file_run(alfworld_data, tmp_path, "init: random\n", "walks")
    assert r.returncode == 0, r.stderr[-3000:]
    rows, config = _harness_rows_and_config(run_dir)
    fill = [row for row in rows if row["parents"] and row["generation"] == 0]
    assert fill and {row["operator"] for row in fill} == {"random"}
    assert config["init"] == "random"
    bad_dir, bad = _config_file_run(alfworld_data, tmp_path, "init: walks\n", "bad")
    assert bad.returncode == 2 and "init" in bad.stderr and not bad_dir.exists()
