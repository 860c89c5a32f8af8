"""Results never depend on timing: the same evaluation at concurrency 1 and 8, or killed twice with SIGKILL
and resumed, gives the same per-game outcomes and the same Experience bank; a template that blows its
budget mid-run fails its own episode only."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harnevo.envs.games import load_games
from harnevo.envs.pool import EnginePool
from harnevo.harness.spec import Harness, load_harness
from harnevo.models import get_model
from harnevo.runtime.evaluate import evaluate

LAG = 3  # small, so that lessons flow between episodes of a 9-game run


def _outcomes(out: Path) -> dict[str, tuple]:
    rows = {}
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        t = json.loads(line)
        rows[t["game"]] = (t["status"], t["success"], t["steps"], t["bank_seen"],
                           [tu["executed"] or tu["meta"] or tu["invalid"] for tu in t["turns"]])
    return rows


@pytest.fixture(scope="module")
def games(alfworld_data):
    return load_games("valid_seen", data=alfworld_data, n=9, seed=11)


@pytest.fixture(scope="module")
def reference(games, tmp_path_factory):
    """bpe_always_on x sim/bounded at concurrency 1 (the uninterrupted, sequential run)."""
    out = tmp_path_factory.mktemp("det") / "c1"

    async def run():
        async with EnginePool(workers=2) as pool:
            return await evaluate(load_harness("bpe_always_on"), get_model("sim/bounded"), games, pool, out=out,
                                  concurrency=1, experience_lag=LAG)

    asyncio.run(run())
    return out


def test_concurrency_does_not_change_outcomes_or_the_bank(games, reference, tmp_path):
    out = tmp_path / "c8"

    async def run():
        async with EnginePool(workers=2) as pool:
            return await evaluate(load_harness("bpe_always_on"), get_model("sim/bounded"), games, pool, out=out,
                                  concurrency=8, experience_lag=LAG)

    asyncio.run(run())
    ref = _outcomes(reference)
    assert _outcomes(out) == ref
    bank = json.loads((reference / "experience.json").read_text())
    assert bank["lessons"], "the run must have learned something for this test to mean anything"
    assert (out / "experience.json").read_text() == (reference / "experience.json").read_text()
    # lessons really reached later episodes: not every episode read the empty starting bank
    assert len({row[3] for row in ref.values()}) > 1


def test_killed_twice_and_resumed_equals_uninterrupted(games, reference, alfworld_data, tmp_path):
    out = tmp_path / "killed"
    names = sorted(g.name for g in games)
    args = [sys.executable, "-m", "harnevo.cli", "apply", "bpe_always_on", "--model", "sim/latency?ms=60",
            "--split", "valid_seen", "--games", "9", "--seed", "11", "--data", str(alfworld_data), "--out", str(out),
            "--concurrency", "4", "--experience-lag", str(LAG), "--workers", "2"]
    traj = out / "trajectories.jsonl"
    for kill_after in (2, 5):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if traj.is_file() and len(traj.read_bytes().splitlines()) >= kill_after:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    n_before = len([l for l in traj.read_bytes().splitlines() if l.endswith(b"}")])
    assert 5 <= n_before < 9, "the kills must land mid-run"
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = _outcomes(out)
    assert sorted(got) == names and len(traj.read_text().splitlines()) == 9  # nothing played twice
    # sim/latency is sim/bounded with a delay: the same agent, so the same outcomes as the reference
    assert got == _outcomes(reference)
    assert (out / "experience.json").read_text() == (reference / "experience.json").read_text()


def test_a_template_over_budget_mid_run_fails_its_episode_only(games, alfworld_data, tmp_path):
    seed = load_harness("react")
    sources = seed.template_sources()
    bomb = ("{% if step > 2 and 'cool' in task %}{% for i in range(100000) %}{% for j in range(100000) %}"
            "{% endfor %}{% endfor %}{% endif %}")
    data = json.loads(json.dumps(seed.model_dump(mode="json")))
    data.pop("prompt", None)
    data["name"] = "react_with_a_bomb"
    data["templates"] = {**sources, "turn": bomb + sources["turn"]}
    h = Harness.from_dict(data, source="test")  # the bomb hides behind `step > 2` at load
    cool = load_games("valid_seen", data=alfworld_data, families=["cool"])[0]
    chosen = [cool] + [g for g in games if g.family != "cool"][:3]

    async def run():
        async with EnginePool(workers=2) as pool:
            return await evaluate(h, get_model("sim/bounded"), chosen, pool, out=tmp_path / "bomb", concurrency=4)

    t0 = time.perf_counter()
    result = asyncio.run(run())
    assert time.perf_counter() - t0 < 120
    by_game = {t.game: t for t in result.trajectories}
    assert by_game[cool.name].reason.startswith("render error") and by_game[cool.name].status == "ok"
    others = [by_game[g.name] for g in chosen[1:]]
    assert all(not t.reason.startswith("render error") for t in others)
    assert sum(t.steps for t in others) > 6  # they played on while the bomb went off


def test_a_frozen_bank_is_read_by_every_episode_and_never_changed(games, tmp_path):
    from harnevo.errors import HarnevoError
    from harnevo.harness.experience import ExperienceBank

    learned = ExperienceBank(None, size=20)
    learned.add("apple was found at a countertop")
    out = tmp_path / "frozen"

    async def run(bank):
        async with EnginePool(workers=2) as pool:
            return await evaluate(load_harness("bpe_always_on"), get_model("sim/bounded"), games[:3], pool, out=out,
                                  concurrency=3, bank=bank, freeze_bank=True)

    result = asyncio.run(run(learned))
    assert {t.bank_seen for t in result.trajectories} == {learned.fingerprint()}
    assert any("apple was found at a countertop" in t.turns[0].messages[1]["content"] for t in result.trajectories)
    assert not (out / "experience.json").exists()  # frozen: nothing learned here is kept
    assert ExperienceBank(out / "experience_base.json").fingerprint() == learned.fingerprint()
    other = ExperienceBank(None, size=20)
    other.add("a lesson from somewhere else")
    with pytest.raises(HarnevoError, match="another Experience bank"):
        asyncio.run(run(other))
