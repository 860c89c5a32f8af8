"""The transfer table (`apply H --model a,b,c`, `apply H1,H2 --model a,b`) on three short generated games with
simulated agents: the table is printed, transfer.json and transfer.png are written, every entry is labelled
(model, simulated, games, n, interval) and agrees with its pair's own apply summary; re-running plays nothing
again and gives the same table; bad input is refused in one line before any episode is played."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODELS = ["sim/bounded", "sim/bounded?knowledge=1", "sim/random"]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harnevo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"})


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    from harnevo.envs.generate import generate

    root = tmp_path_factory.mktemp("transfer-games")
    generate(root, 3, families=["pick", "look", "heat"], seed=5, split="generated", workers=2)
    return root


def _args(games: Path, out: Path) -> list[str]:
    return ["--split", "generated", "--data", str(games), "--max-steps", "15", "--workers", "2",
            "--concurrency", "3", "--out", str(out)]


def _within(cell: dict) -> bool:
    """The interval holds the rate (within float rounding: Wilson's bound at 0% is ~1e-17, not 0)."""
    lo, hi = cell["ci95"]
    return 0.0 <= lo <= cell["success"] + 1e-9 and cell["success"] <= hi + 1e-9 and hi <= 1.0


def _check_entry(e: dict, out: Path) -> None:
    assert e["simulated"] is True and e["split"] == "generated" and e["data_source"].startswith("generated")
    a = e["all"]
    assert a["games"] == 3 and _within(a)
    assert sum(f["games"] for f in e["per_family"].values()) == 3
    assert all(_within(f) for f in e["per_family"].values())
    assert e["tokens_per_episode"] > 0 and e["cost_usd"] == 0.0 and e["complete"] is True
    s = json.loads((Path(e["out"]) / "summary.json").read_text())  # the pair's own apply results
    assert Path(e["out"]).parent.parent == out
    assert s["model"] == e["model"] and s["success_rate"] == a["success"] and s["ci95"] == a["ci95"]
    assert s["behaviour_id"] == e["behaviour_id"]


def test_one_harness_three_models(games, tmp_path):
    out = tmp_path / "t"
    r = _cli("apply", "react", "--model", ",".join(MODELS), *_args(games, out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "x model: success per task family" in r.stdout and "(sim) = simulated agent" in r.stdout
    for m in MODELS:
        assert m in r.stdout
    table = json.loads((out / "transfer.json").read_text())
    assert table["models"] == MODELS and table["harnesses"] == ["react"]
    assert [e["model"] for e in table["entries"]] == MODELS
    assert table["ci_method"].startswith("Wilson 95% over games")
    for e in table["entries"]:
        _check_entry(e, out)
    png = (out / "transfer.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    by = {e["model"]: e for e in table["entries"]}
    assert by["sim/random"]["all"]["success"] <= by["sim/bounded?knowledge=1"]["all"]["success"]
    # re-running resumes every pair: nothing played again, the same table and plot
    again = _cli("apply", "react", "--model", ",".join(MODELS), *_args(games, out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((out / "transfer.json").read_text()) == table
    assert (out / "transfer.png").read_bytes() == png
    for e in table["entries"]:
        s = json.loads((Path(e["out"]) / "summary.json").read_text())
        assert s["episodes_played_now"] == 0 and s["episodes_resumed"] == 3


def test_the_harness_by_model_grid(games, tmp_path):
    out = tmp_path / "grid"
    r = _cli("apply", "react,bpe_always_on", "--model", "sim/bounded,sim/random", *_args(games, out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "harness x model: success over all games" in r.stdout
    table = json.loads((out / "transfer.json").read_text())
    pairs = [(e["harness"], e["model"]) for e in table["entries"]]
    assert pairs == [("react", "sim/bounded"), ("react", "sim/random"), ("bpe_always_on", "sim/bounded"),
                     ("bpe_always_on", "sim/random")]
    for e in table["entries"]:
        _check_entry(e, out)
    assert len({e["out"] for e in table["entries"]}) == 4
    assert (out / "transfer.png").read_bytes().startswith(b"\x89PNG")


def test_bad_input_is_refused_before_playing(games, tmp_path):
    def one_line(r, needle):
        assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert needle in r.stderr, r.stderr

    out = tmp_path / "bad"
    one_line(_cli("apply", "react", "--model", "sim/bounded,,sim/random", *_args(games, out)), "empty name")
    one_line(_cli("apply", "react,no_such_harness", "--model", "sim/bounded,sim/random", *_args(games, out)),
             "unknown harness 'no_such_harness'")
    one_line(_cli("apply", "react", "--model", "sim/bounded,nosuchprovider/x", *_args(games, out)), "nosuchprovider")
    assert not out.exists()  # nothing was played, no folder left behind


def test_names_and_folders(tmp_path):
    from harnevo.errors import HarnevoError
    from harnevo.runtime.apply import ApplyOptions
    from harnevo.runtime.transfer import plan, slugs, split_names

    with pytest.raises(HarnevoError, match="'react' twice"):
        plan(ApplyOptions(harness="react,react", model="sim/bounded", out=tmp_path / "o"))
    with pytest.raises(HarnevoError, match="single harness"):
        plan(ApplyOptions(harness="react,bpe_inline", model="sim/bounded", out=tmp_path / "o", bank=tmp_path / "b"))
    p = plan(ApplyOptions(harness="react,bpe_inline", model="sim/bounded,sim/random", out=tmp_path / "o"))
    assert [(x["harness"], x["model"], x["out"].relative_to(tmp_path / "o").as_posix()) for x in p] == [
        ("react", "sim/bounded", "react/sim_bounded"), ("react", "sim/random", "react/sim_random"),
        ("bpe_inline", "sim/bounded", "bpe_inline/sim_bounded"), ("bpe_inline", "sim/random", "bpe_inline/sim_random")]

    assert split_names(" a , b ", "--model") == ["a", "b"]
    s = slugs(["sim/bounded", "sim/bounded?knowledge=1", "a/b", "a_b", "runs/r1:best"])
    assert s["sim/bounded"] == "sim_bounded" and s["sim/bounded?knowledge=1"] == "sim_bounded_knowledge_1"
    assert s["a/b"] != s["a_b"] and s["a/b"].startswith("a_b-") and s["runs/r1:best"] == "runs_r1_best"
