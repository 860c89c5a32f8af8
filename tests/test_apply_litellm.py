"""`harnevo apply` against a real OpenAI-compatible HTTP server on 127.0.0.1, through litellm:
faults survived, nothing lost or played twice, a cache that makes the replay free, a budget that
holds, no key anywhere; and a local `hf/` checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    from tests.fake_openai_server import TEST_API_KEY, FakeOpenAIServer
except ImportError:
    from fake_openai_server import TEST_API_KEY, FakeOpenAIServer

from harnevo.models.sim import make_sim

_AGENT = make_sim("sim/bounded?lapse=0")


def scripted(messages):
    """The server plays ALFWorld: a lapse-free simulated agent answers from the request's messages."""
    return asyncio.run(_AGENT.complete(messages)).text


def _apply(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": TEST_API_KEY, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "harnevo.cli", "apply", *args], capture_output=True, text=True,
                          timeout=600, env=env)


def _trajs(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "trajectories.jsonl").read_text().splitlines() if l.strip()]


@pytest.fixture
def server():
    with FakeOpenAIServer(reply=scripted, hang_s=3) as srv:
        yield srv


def _common(alfworld_data: Path, srv: FakeOpenAIServer, out: Path, cache: Path, games: int = 3) -> list[str]:
    return ["react", "--model", "openai/test-model", "--api-base", srv.url, "--split", "valid_seen",
            "--games", str(games), "--seed", "7", "--data", str(alfworld_data), "--out", str(out),
            "--cache", str(cache), "--timeout", "1", "--concurrency", "3", "--max-steps", "30"]


def test_faults_survived_then_cached_replay_is_free(alfworld_data, server, tmp_path):
    cache = tmp_path / "replies.sqlite"
    server.set_faults("429:1*2,500,hang,malformed,empty,502")
    out1 = tmp_path / "run1"
    r = _apply(*_common(alfworld_data, server, out1, cache))
    assert r.returncode == 0, r.stderr[-2000:]
    trajs = _trajs(out1)
    assert len(trajs) == 3 and len({t["key"] for t in trajs}) == 3
    assert all(t["success"] or t["reason"] for t in trajs)
    summary = json.loads((out1 / "summary.json").read_text())
    assert summary["games"] == 3 and summary["simulated"] is False and summary["model"] == "openai/test-model"
    assert summary["retries"] >= 7  # every injected fault was retried, and counted
    assert summary["success_rate"] > 0  # the scripted agent solves games through the whole path
    assert len(server.faults_served) == 7
    served = server.requests
    # the same evaluation again, into a fresh folder: every reply comes from the cache, no request is made
    out2 = tmp_path / "run2"
    r = _apply(*_common(alfworld_data, server, out2, cache))
    assert r.returncode == 0, r.stderr[-2000:]
    assert server.requests == served
    s2 = json.loads((out2 / "summary.json").read_text())
    assert s2["cache_hits"] == sum(len(t["turns"]) for t in _trajs(out2)) > 0
    assert s2["success_rate"] == summary["success_rate"] and s2["spent_usd"] == 0
    # the key is nowhere: results, cache, logs
    for path in [*out1.rglob("*"), *out2.rglob("*"), *tmp_path.glob("replies.sqlite*")]:
        if path.is_file():
            assert TEST_API_KEY.encode() not in path.read_bytes(), path
    assert TEST_API_KEY not in r.stdout + r.stderr


def test_failed_calls_are_infra_errors_not_failures(alfworld_data, server, tmp_path):
    server.set_faults("500*40")  # more than the retries allow: the episode is an infra_error
    out = tmp_path / "fail"
    args = _common(alfworld_data, server, out, tmp_path / "c.sqlite", games=1)
    r = _apply(*args, "--no-cache", env_extra={})
    assert r.returncode == 0, r.stderr[-2000:]
    (t,) = _trajs(out)
    assert t["status"] == "infra_error" and t["reason"].startswith("model call failed") and "500" in t["reason"]
    assert TEST_API_KEY not in t["reason"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["infra_errors"] == 1 and summary["games"] == 0 and summary["success_rate"] == 0.0


def test_budget_stops_at_the_limit(alfworld_data, server, tmp_path):
    out = tmp_path / "budget"
    # 100 USD per million tokens: a call of ~600 tokens costs ~6 cents; an episode several calls
    args = _common(alfworld_data, server, out, tmp_path / "b.sqlite", games=8)
    args[args.index("--concurrency") + 1] = "2"
    r = _apply(*args, "--no-cache", "--price", "100,100", "--budget-usd", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped_by_budget"] is True and summary["games"] < 8
    assert "budget" in r.stdout
    b = summary["budget"]
    per_call_max = max(tu["cost_usd"] for t in _trajs(out) for tu in t["turns"])
    assert b["spent_usd"] <= 0.5 + 2 * per_call_max  # at most the calls already in flight
    assert summary["cost_usd"] <= b["spent_usd"] + 1e-9


def test_apply_with_a_local_hf_checkpoint(alfworld_data, tmp_path):
    pytest.importorskip("torch")
    from harnevo.models.tiny import build_tiny_checkpoint

    ckpt = build_tiny_checkpoint(tmp_path / "tiny")
    out = tmp_path / "hf"
    r = _apply("react", "--model", f"hf/{ckpt}", "--games", "2", "--split", "valid_seen", "--data",
               str(alfworld_data), "--out", str(out), "--max-steps", "4", "--max-tokens", "24", "--no-cache",
               env_extra={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["games"] == 2 and summary["model"] == f"hf/{ckpt}" and summary["simulated"] is False
    assert all(len(t["turns"]) == 4 for t in _trajs(out))
