"""`harnevo apply` end to end with a simulated agent in the real engine: results, resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harnevo.runtime.apply import ApplyOptions, run_apply
from harnevo.runtime.summary import wilson

SUMMARY_KEYS = {"harness_id", "behaviour_id", "harness_name", "infra_errors", "spent_usd", "episodes", "model", "simulated", "split", "games", "success_rate", "ci95",
                "per_family", "mean_steps", "meta_actions_per_episode", "prompt_tokens", "completion_tokens",
                "cost_usd", "wall_seconds", "data_source", "alfworld", "textworld"}


def _lines(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "trajectories.jsonl").read_text().splitlines() if l.strip()]


def _cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harnevo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("harness", ["react", "bpe_always_on", "bpe_inline"])
def test_apply_writes_results_and_resumes(harness, alfworld_data, tmp_path):
    out = tmp_path / harness
    opts = ApplyOptions(harness=harness, model="sim/bounded", split="valid_seen", games=3, seed=3,
                        concurrency=3, out=out, data=alfworld_data, workers=2)
    summary = run_apply(opts)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["games"] == 3 and summary["simulated"] is True and summary["model"] == "sim/bounded"
    trajs = _lines(out)
    wins = sum(t["success"] for t in trajs)
    assert summary["successes"] == wins and summary["success_rate"] == wins / 3
    assert summary["ci95"] == list(wilson(wins, 3))
    assert sum(f["games"] for f in summary["per_family"].values()) == 3
    assert len(trajs) == 3 and len({t["key"] for t in trajs}) == 3 and all(t["status"] == "ok" for t in trajs)
    t = trajs[0]
    assert t["turns"] and t["turns"][0]["messages"][0]["role"] == "system" and t["task"]
    assert t["task"] in t["turns"][0]["messages"][1]["content"]
    assert all(tu["reply"].strip() and (tu["executed"] or tu["meta"] or tu["invalid"] or tu["guard_note"])
               for tu in t["turns"])
    assert t["steps"] == t["turns"][-1]["step"] and (t["success"] == (t["reason"] == "won"))
    if harness == "bpe_inline":
        assert (out / "experience.json").is_file()
    # re-running into the same folder plays nothing again
    again = run_apply(opts)
    assert again["episodes_played_now"] == 0 and again["episodes_resumed"] == 3
    assert len(_lines(out)) == 3 and again["success_rate"] == summary["success_rate"]


def test_sigkill_halfway_then_resume(alfworld_data, tmp_path):
    out = tmp_path / "killed"
    args = ["apply", "react", "--model", "sim/latency?ms=150", "--split", "valid_seen", "--games", "20",
            "--data", str(alfworld_data), "--out", str(out), "--concurrency", "4"]
    proc = subprocess.Popen([sys.executable, "-m", "harnevo.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    traj = out / "trajectories.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline:
        if traj.is_file() and len(traj.read_text().splitlines()) >= 8:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its engine workers, at once
    proc.wait()
    before = {json.loads(l)["key"] for l in traj.read_text().splitlines() if l.strip().endswith("}")}
    assert 8 <= len(before) < 20
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    trajs = _lines(out)
    keys = [t["key"] for t in trajs]
    assert len(keys) == 20 and len(set(keys)) == 20  # none played twice
    summary = json.loads((out / "summary.json").read_text())
    assert summary["games"] == 20 and summary["episodes_resumed"] == len(before)
    assert summary["episodes_played_now"] == 20 - len(before)


def _one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert needle in err, err


def test_bad_input_is_one_line_and_exit_2(alfworld_data, tmp_path):
    empty = tmp_path / "nodata"
    empty.mkdir()
    _one_line_error(_cli("apply", "react", "--split", "valid_seen", "--data", str(empty), "--out",
                         str(tmp_path / "o1")), "alfworld-download")
    _one_line_error(_cli("apply", "no_such_harness", "--data", str(alfworld_data), "--out", str(tmp_path / "o2")),
                    "unknown harness 'no_such_harness'")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmode: env_only\nflavour: sweet\ntemplates:\n  system: hi\n  turn: '{{ task }}'\n")
    _one_line_error(_cli("apply", str(bad), "--data", str(alfworld_data), "--out", str(tmp_path / "o3")),
                    "unknown field 'flavour'")
    evil = tmp_path / "evil.yaml"
    evil.write_text("name: evil\ntemplates:\n  system: hi\n  turn: '{{ task.__class__.__mro__ }}'\n")
    _one_line_error(_cli("apply", str(evil), "--data", str(alfworld_data), "--out", str(tmp_path / "o4")),
                    "unsafe")
    _one_line_error(_cli("apply", "react", "--model", "nosuchprovider/some-model", "--data", str(alfworld_data),
                         "--games", "1", "--out", str(tmp_path / "o5")), "nosuchprovider")


def test_data_check(alfworld_data):
    r = _cli("data", "check", "--data", str(alfworld_data))
    assert r.returncode == 0, r.stderr
    assert "valid_seen" in r.stdout and "140" in r.stdout and "134" in r.stdout


def test_help_is_fast():
    t0 = time.perf_counter()
    r = _cli("--help")
    assert r.returncode == 0 and "apply" in r.stdout
    assert time.perf_counter() - t0 < 3.0  # the acceptance bar is 1 s on an idle machine; CI is shared
    r = subprocess.run([sys.executable, "-c", "import harnevo.cli, sys; "
                        "bad = [m for m in ('litellm', 'textworld', 'torch', 'alfworld') if m in sys.modules]; "
                        "print(bad); sys.exit(bool(bad))"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_apply_falls_back_to_generated_games(tmp_path, monkeypatch):
    """With no official data, apply plays the generated default set (generated once into the cache
    folder, reused after) and says so. The set is pre-filled with a few games here to keep it short."""
    from harnevo.envs.games import GENERATED_SPLIT, generated_cache_root
    from harnevo.envs.generate import generate

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HARNEVO_CACHE", str(tmp_path / "cache"))
    generate(generated_cache_root(), 3, families=["pick", "heat", "look"], seed=5, split=GENERATED_SPLIT)
    summary = run_apply(ApplyOptions(harness="react", model="sim/bounded", out=tmp_path / "gen", workers=1))
    assert summary["split"] == GENERATED_SPLIT and summary["games"] == 3
    assert summary["data_source"].startswith("generated (synthetic)")
