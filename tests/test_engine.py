"""The concurrent ALFWorld engine (EnginePool) on a few official valid_seen games.

One pool (2 workers, step cache off: the fork path) is shared by the module's tests to keep them fast;
tests that need their own settings (expert, step cache, shutdown checks) start a small pool of one
worker. The step cache's own tests (healing, audits, persistence, damaged files) are in
tests/test_step_cache.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harnevo.envs.alfworld import Observation
from harnevo.errors import HarnevoError
from harnevo.envs.pool import EngineEpisode, EngineError, EnginePool
from harnevo.envs.stepcache import game_key

DATA = Path(__file__).resolve().parents[2] / "shared" / "alfworld"
SPLIT = DATA / "json_2.1.1" / "valid_seen"
REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.needs_alfworld_data,
    pytest.mark.skipif(not SPLIT.is_dir(), reason=f"ALFWorld games not found at {SPLIT} (the workplace's shared copy)"),
]


def _games() -> list[str]:
    # the first games sorted by name are look_at_obj_in_light ones: 3-4 step walkthroughs
    return [str(p) for p in sorted(SPLIT.glob("*/*/game.tw-pddl"))[:3]]


def _walkthrough(game: str) -> list[str]:
    with open(game) as f:
        return json.load(f)["walkthrough"]


def _children_of(pid: int) -> set[int]:
    """Live (non-zombie) processes whose parent is `pid`."""
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _play(ep: EngineEpisode, actions: list[str]) -> Observation:
    obs = ep.first
    for a in actions:
        obs = await ep.step(a)
    return obs


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def pool(loop):
    p = EnginePool(2, step_timeout_s=60, step_cache=None)  # the fork path; the step cache has its own tests
    loop.run_until_complete(p.__aenter__())
    yield p
    loop.run_until_complete(p.__aexit__(None, None, None))


def run(loop, coro, timeout: float = 60):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def test_walkthroughs_win(pool, loop):
    async def one(game):
        ep = await pool.new_episode(game)
        assert ep.first.text.startswith("-= Welcome to TextWorld, ALFRED! =-")
        assert ep.first.admissible and not ep.first.won
        obs = await _play(ep, _walkthrough(game))
        await ep.close()
        return obs

    async def both():
        return await asyncio.gather(*(one(g) for g in _games()[:2]))

    results = run(loop, both())
    assert all(obs.won and obs.done for obs in results)
    assert pool.stats["steps"] >= 6 and pool.stats["errors"] == 0


def test_forked_episodes_are_independent(pool, loop):
    game = _games()[0]
    walk = _walkthrough(game)

    async def scenario():
        warm = await pool.new_episode(game)  # makes sure the game is reset in its worker
        await warm.close()
        a, b = await pool.new_episode(game), await pool.new_episode(game)
        assert a.forked_from_cache and b.forked_from_cache
        assert a.first == b.first == warm.first
        # a plays the whole walkthrough (it picks an object up) before b moves at all
        obs_a = await _play(a, walk)
        assert obs_a.won
        inv = await b.step("inventory")
        assert "not carrying anything" in inv.text
        obs_b = await _play(b, walk)
        assert obs_b.won
        c = await pool.new_episode(game)  # the worker's copy is still at the start state
        assert c.first == a.first and c.start_seconds < 5
        for ep in (a, b, c):
            await ep.close()
        with pytest.raises(EngineError, match="closed"):
            await a.step("look")

    run(loop, scenario())


def test_bad_game_files_are_episode_errors(pool, loop, tmp_path):
    garbage = tmp_path / "garbage.tw-pddl"
    garbage.write_bytes(b"\x00not a game\xff")
    not_a_game = tmp_path / "json.tw-pddl"
    not_a_game.write_text('{"walkthrough": []}')

    async def scenario():
        for bad in (tmp_path / "missing.tw-pddl", garbage, not_a_game, tmp_path):
            with pytest.raises(EngineError) as info:
                await pool.new_episode(str(bad))
            assert "\n" not in str(info.value)
        ep = await pool.new_episode(_games()[0])  # the pool still serves
        assert (await _play(ep, _walkthrough(_games()[0]))).won
        await ep.close()

    run(loop, scenario())


def test_dead_worker_is_restarted_and_its_episodes_live_on(pool, loop):
    game = _games()[1]
    walk = _walkthrough(game)

    async def scenario():
        survivor = await pool.new_episode(game)
        worker = pool._worker_for(game_key(os.path.realpath(game)))
        restarts = pool.stats["worker_restarts"]
        os.kill(worker.proc.pid, signal.SIGKILL)
        await worker.proc.wait()
        await asyncio.sleep(0.1)
        ep = await pool.new_episode(game)  # restarts the worker, which resets the game again
        assert pool.stats["worker_restarts"] == restarts + 1 and not ep.forked_from_cache
        assert (await _play(ep, walk)).won
        assert (await _play(survivor, walk)).won  # its process talks to the pool, not the worker
        await ep.close()
        await survivor.close()

    run(loop, scenario())


def test_cancelled_step_ends_the_episode(pool, loop):
    async def scenario():
        ep = await pool.new_episode(_games()[0])
        task = asyncio.ensure_future(ep.step("look"))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(EngineError):
            await ep.step("look")

    run(loop, scenario())


def test_expert_plan_step_cache_and_clean_close():
    game = _games()[0]

    async def scenario():
        async with EnginePool(1, expert="handcoded", step_cache=":memory:") as pool:
            ep = await pool.new_episode(game)
            obs, actions = ep.first, []
            for _ in range(30):
                assert obs.expert_plan, "the handcoded expert gave no plan"
                actions.append(obs.expert_plan[0])
                obs = await ep.step(actions[-1])
                if obs.won:
                    break
            assert obs.won, f"the handcoded expert did not win with {actions}"
            # the same actions again: answered by the step cache, no engine process at all
            again = await pool.new_episode(game)
            forks = pool.stats["forks"]
            assert (await _play(again, actions)).won and pool.stats["forks"] == forks
            assert pool.stats["step_cache_hits"] == len(actions)
            # a new action: the engine forks, replays the prefix (checked), then steps
            look = await again.step("look")
            assert look.expert_plan and pool.stats["replayed_steps"] == len(actions)
            assert pool.stats["step_cache_mismatches"] == 0
            pids = [w.proc.pid for w in pool._workers] + [ep._pid, again._pid]
            assert all(_alive(p) for p in pids)
        return pids

    before = _children_of(os.getpid())
    pids = asyncio.run(asyncio.wait_for(scenario(), 60))
    left = [(p, Path(f"/proc/{p}/stat").read_text()) for p in pids if _alive(p)]
    assert not left, (pids, left)
    assert _children_of(os.getpid()) <= before


def test_keyboard_interrupt_leaves_no_process(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, faulthandler, json, signal, sys
        from harnevo.envs.pool import EnginePool
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks if exiting hangs
        # a terminal's Ctrl-C: a test run started in the background (`cmd &` in a script) passes SIGINT on as
        # ignored, and Python then leaves it ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        async def main():
            async with EnginePool(1, step_cache=None) as pool:
                ep = await pool.new_episode({_games()[0]!r})
                print(json.dumps([pool._workers[0].proc.pid, ep._pid]), flush=True)
                await asyncio.sleep(600)
        asyncio.run(main())
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode()[-2000:]
        pids = json.loads(line)
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            proc.kill()
            raise AssertionError("Ctrl-C did not end the process within 20 s; its stacks:\n"
                                 + proc.stderr.read().decode()[-4000:]) from None
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)]
        assert b"KeyboardInterrupt" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_an_engine_that_cannot_start_is_a_systemic_error(monkeypatch):
    """Workers start on first need; when none of them can start at all, that is not one episode's
    failure but the whole run's: a one-line HarnevoError, raised at once on later requests too."""
    monkeypatch.setenv("PYTHONHOME", "/nonexistent")  # the worker's interpreter cannot even start

    async def scenario():
        async with EnginePool(1, step_cache=None) as pool:
            with pytest.raises(HarnevoError, match="the ALFWorld engine did not start") as info:
                await pool.new_episode(_games()[0])
            assert "\n" not in str(info.value)
            t0 = time.monotonic()
            with pytest.raises(HarnevoError, match="did not start"):
                await pool.new_episode(_games()[1])
            assert time.monotonic() - t0 < 1.0  # no second attempt

    asyncio.run(asyncio.wait_for(scenario(), 90))
