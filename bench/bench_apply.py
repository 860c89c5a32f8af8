"""Throughput of the whole episode loop (harness + model + engine), in episodes per second.

1. An agent that answers instantly with each game's stored walkthrough (a bench-only agent that may
   read them) under the `react` harness, on games already played once, through EnginePool (fork from
   reset games + step cache), against a plain replay of the same walkthroughs in TextWorld with one
   reset per episode in one process (what a reset-per-episode evaluator achieves). Also the pool with
   its step cache off (fork only), to show where the gain comes from. (Two separate `harnevo apply`
   processes sharing the step cache file: bench/bench_second_invocation.py.)
2. `sim/latency?ms=200` (sim/bounded answering after a fixed 200 ms) under `bpe_always_on` at
   concurrency 1, 4 and 16 on games already played once.
3. Cache-hit replay: episodes played through litellm against a local OpenAI-compatible server
   (tests/fake_openai_server.py, replies from a lapse-free sim/bounded), then the same evaluation
   replayed from the reply cache: episodes per second, and the HTTP requests the replay made (0).

    python bench/bench_apply.py [--data DIR] [--games 8] [--latency-games 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnevo.envs import alfworld as A  # noqa: E402
from harnevo.envs.pool import EnginePool  # noqa: E402
from harnevo.envs.games import load_games  # noqa: E402
from harnevo.harness.spec import load_harness  # noqa: E402
from harnevo.models import get_model  # noqa: E402
from harnevo.models.base import Reply, Usage  # noqa: E402
from harnevo.runtime.episode import HarnessProgram, run_episode  # noqa: E402

DEFAULT_DATA = Path(os.environ.get("ALFWORLD_DATA") or Path(__file__).resolve().parents[2] / "shared/alfworld")


class WalkthroughAgent:
    """Bench only: replies with the game's stored walkthrough, one action per call, instantly."""

    simulated = True

    def __init__(self, actions: list[str]):
        self.name, self.actions, self.i = "bench/walkthrough", actions, 0

    async def complete(self, messages, **kw) -> Reply:
        a = self.actions[min(self.i, len(self.actions) - 1)]
        self.i += 1
        return Reply(text=f"Action: {a}", usage=Usage())

    async def aclose(self) -> None:
        pass


def walkthrough(game) -> list[str]:
    return json.loads(Path(game.path).read_text())["walkthrough"]


def plain_replay(games) -> float:
    t0 = time.perf_counter()
    for g in games:
        env = A.make_env(g.path)
        A.reset(env)
        obs = None
        for a in walkthrough(g):
            obs = A.step(env, a)
        assert obs is not None and obs.won
        env.close()
    return len(games) / (time.perf_counter() - t0)


async def loop_replay(games, *, step_cache: str | None, concurrency: int = 8) -> tuple[float, float, dict]:
    """(episodes/s on games already played once, first-pass episodes/s, pool stats). Both passes share
    one pool; the step cache, when on, lives in this process only."""
    program = HarnessProgram(load_harness("react"))
    sem = asyncio.Semaphore(concurrency)

    async def one(pool, g):
        async with sem:
            t = await run_episode(program, WalkthroughAgent(walkthrough(g)), pool, g)
            assert t.success, (g.name, t.reason)

    async with EnginePool(step_cache=step_cache, audit=0) as pool:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(pool, g) for g in games))
        first = len(games) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(pool, g) for g in games))
        warm = len(games) / (time.perf_counter() - t0)
        return warm, first, dict(pool.stats)


async def latency_runs(games, levels) -> dict[int, float]:
    program = HarnessProgram(load_harness("bpe_always_on"))
    model = get_model("sim/latency?ms=200")
    out = {}
    async with EnginePool(step_cache=":memory:") as pool:
        await asyncio.gather(*(run_episode(program, model, pool, g) for g in games))  # warm the workers
        for c in levels:
            sem = asyncio.Semaphore(c)

            async def one(g):
                async with sem:
                    await run_episode(program, model, pool, g)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(g) for g in games))
            out[c] = len(games) / (time.perf_counter() - t0)
    return out


async def cache_replay(games, tmp: Path) -> tuple[float, float, int]:
    """(first run episodes/s, replay episodes/s, requests made by the replay)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fake_openai_server import TEST_API_KEY, FakeOpenAIServer

    from harnevo.models.cache import ReplyCache
    from harnevo.runtime.evaluate import evaluate

    agent = get_model("sim/bounded?lapse=0&knowledge=1&forget_per_1k=0")
    os.environ["OPENAI_API_KEY"] = TEST_API_KEY
    harness = load_harness("react")
    rates = []
    with FakeOpenAIServer(reply=lambda m: asyncio.run(agent.complete(m)).text) as srv:
        async with EnginePool(step_cache=":memory:") as pool:
            for run in ("first", "replay"):
                before = srv.requests
                model = get_model("openai/bench", api_base=srv.url, cache=ReplyCache(tmp / "replies.sqlite"))
                t0 = time.perf_counter()
                await evaluate(harness, model, games, pool, out=tmp / run, concurrency=8)
                rates.append(len(games) / (time.perf_counter() - t0))
                await model.aclose()
            return rates[0], rates[1], srv.requests - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=8)
    ap.add_argument("--latency-games", type=int, default=16)
    args = ap.parse_args()
    games = load_games(args.split, data=args.data, n=args.games, seed=0)
    print(f"{len(games)} {args.split} games (official ALFWorld), harness react, bench/walkthrough agent "
          f"(instant, stored walkthroughs), {os.cpu_count()} cores")
    plain = plain_replay(games)
    print(f"  plain TextWorld replay, one reset per episode, one process: {plain:8.2f} episodes/s")
    warm_fork, first_fork, _ = asyncio.run(loop_replay(games, step_cache=None))
    print(f"  harnevo loop, pool fork only (step cache off):  first pass {first_fork:6.2f}, "
          f"games already played {warm_fork:8.2f} episodes/s  ({warm_fork / plain:5.1f}x plain)")
    warm, first, stats = asyncio.run(loop_replay(games, step_cache=":memory:"))
    print(f"  harnevo loop, pool fork + step cache (one process): first pass {first:6.2f}, "
          f"games already played {warm:8.2f} episodes/s  ({warm / plain:5.1f}x plain)")
    lat_games = load_games(args.split, data=args.data, n=args.latency_games, seed=1)
    rates = asyncio.run(latency_runs(lat_games, (1, 4, 16)))
    print(f"{len(lat_games)} {args.split} games, harness bpe_always_on, sim/latency?ms=200 [simulated]:")
    for c, r in rates.items():
        print(f"  concurrency {c:2d}: {r:6.2f} episodes/s  ({r / rates[1]:4.1f}x concurrency 1)")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        first, replay, requests = asyncio.run(cache_replay(games, Path(tmp)))
    print(f"{len(games)} {args.split} games, harness react, openai/bench via litellm against a local server "
          f"(scripted sim replies):")
    print(f"  first run {first:6.2f} episodes/s; replay from the reply cache {replay:8.2f} episodes/s "
          f"({requests} HTTP requests)")


if __name__ == "__main__":
    main()
