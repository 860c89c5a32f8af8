"""The seed harnesses win with `sim/bounded` through the real loop: `harnevo.runtime.evaluate.evaluate` on a
real `EnginePool`, six fixed official games (the first valid_seen game of each task family by sorted name).

The floors are regression floors, measured on 2026-12-03 (with the runtime and templates before and
after that day's refactors, same numbers): with `sim/bounded` (seed 0) react won 6/6, bpe_always_on 6/6
and bpe_inline 6/6. sim/bounded's replies depend on the exact text of the messages, so a harmless
change of a template rolls its dice again; over 25 sim seeds (`sim/bounded?seed=0..24`, the same games
and loop, concurrency 6) react won 4 to 6 (4 once, 5 on thirteen seeds), and bpe_always_on and bpe_inline
won 6/6 every time. The floors are those minima: a seed winning less means that the harness, the loop,
the engine or the sim got worse, not bad luck.
"""

from __future__ import annotations

import asyncio

import pytest

from harnevo.envs.games import FAMILIES, scan_split
from harnevo.harness.spec import load_harness
from harnevo.models import get_model

FLOORS = {"react": 4, "bpe_always_on": 6, "bpe_inline": 6}


@pytest.fixture(scope="module")
def six_games(alfworld_data):
    games = scan_split(alfworld_data, "valid_seen")
    return [next(g for g in games if g.family == family) for family in FAMILIES]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One engine pool (and its event loop) for all three seeds, so each game is reset once. Its caches
    go to a fresh folder (the autouse hermetic fixture is per test and comes after this one)."""
    pytest.importorskip("alfworld")
    from harnevo.envs.pool import EnginePool

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNEVO_CACHE", str(tmp_path_factory.mktemp("engine-cache")))
        loop = asyncio.new_event_loop()
        pool = EnginePool(workers=2)
        loop.run_until_complete(pool.__aenter__())
        try:
            yield loop, pool
        finally:
            loop.run_until_complete(pool.__aexit__(None, None, None))
            loop.close()


@pytest.mark.parametrize("seed", list(FLOORS))
def test_seed_wins_its_floor(seed, six_games, engine, tmp_path):
    from harnevo.runtime.evaluate import evaluate

    loop, pool = engine
    harness = load_harness(seed)
    model = get_model("sim/bounded")
    result = loop.run_until_complete(evaluate(harness, model, six_games, pool, out=tmp_path / seed, concurrency=6))
    trajs = sorted(result.trajectories, key=lambda t: t.game)
    assert [t.game for t in trajs] == sorted(g.name for g in six_games)
    assert {t.family for t in trajs} == set(FAMILIES) and all(t.simulated for t in trajs)
    outcome = {t.family: (t.success, t.steps) for t in trajs}
    wins = sum(t.success for t in trajs)
    assert wins >= FLOORS[seed], f"{seed} with sim/bounded won {wins}/6 (floor {FLOORS[seed]}): {outcome}"
    assert result.summary["success_rate"] == pytest.approx(wins / 6)
    assert all(0 < t.steps <= harness.budget.max_steps for t in trajs)
    # only the inline harness offers meta-actions, and the sim uses them when offered
    metas = sum(t.meta_actions for t in trajs)
    assert (metas > 0) if harness.mode == "inline" else (metas == 0), metas
