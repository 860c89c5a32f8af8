"""Benchmark of the ALFWorld engine layer: plain TextWorld in one process vs EnginePool.

Prints (a) the engine's own step time, (b) a plain reset vs starting an episode on a game already
played (fork from the worker's cache), (c) a sequential replay of the stored walkthroughs (one reset
per episode, one process) vs the same replays through EnginePool on games already played once,
in episodes per second, and the ratio.

    python bench/bench_engine.py                      # 4 valid_seen games x 3 repeats, ~1-2 min
    python bench/bench_engine.py --games 8 --repeats 4 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harnevo.envs import alfworld as A  # noqa: E402
from harnevo.envs.pool import EnginePool  # noqa: E402
from harnevo.envs.games import scan_split  # noqa: E402


def default_data() -> Path:
    return Path(os.environ.get("ALFWORLD_DATA") or Path(__file__).resolve().parents[2] / "shared/alfworld")


def pick_games(data: Path, split: str, n: int) -> list[tuple[str, list[str]]]:
    """n games spread over the sorted split (so over task families), with their walkthroughs."""
    games = scan_split(data, split)
    if not games:
        sys.exit(f"no games in {data}/json_2.1.1/{split}: pass --data or set $ALFWORLD_DATA")
    picked = [games[i * len(games) // n] for i in range(min(n, len(games)))]
    out = []
    for g in picked:
        with open(g.path) as f:
            out.append((g.path, json.load(f)["walkthrough"]))
    return out


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def sequential(games: list[tuple[str, list[str]]], repeats: int) -> tuple[float, list[float], list[float], list[float]]:
    """One process, one make_env + reset per episode, walkthrough replayed. Returns (wall, resets,
    resets on an already-made env, steps)."""
    resets, rereset, steps = [], [], []
    t0 = time.perf_counter()
    for _ in range(repeats):
        for path, walk in games:
            t = time.perf_counter()
            env = A.make_env(path)
            A.reset(env)
            resets.append(time.perf_counter() - t)
            obs = None
            for a in walk:
                t = time.perf_counter()
                obs = A.step(env, a)
                steps.append(time.perf_counter() - t)
            assert obs is not None and obs.won, f"walkthrough did not win {path}"
            env.close()
    wall = time.perf_counter() - t0
    path, _walk = games[0]
    env = A.make_env(path)
    for _ in range(2):
        t = time.perf_counter()
        A.reset(env)
        rereset.append(time.perf_counter() - t)
    env.close()
    return wall, resets, rereset, steps


def memo_steps(games: list[tuple[str, list[str]]]) -> list[float]:
    """Step times in this process once the parse memo is installed (first episode warms it)."""
    A.install_parse_memo()
    steps = []
    for rep in range(2):
        for path, walk in games:
            env = A.make_env(path)
            A.reset(env)
            for a in walk:
                t = time.perf_counter()
                A.step(env, a)
                if rep:
                    steps.append(time.perf_counter() - t)
            env.close()
    return steps


async def play(pool: EnginePool, path: str, walk: list[str]) -> tuple[float, list[float]]:
    ep = await pool.new_episode(path)
    walls = []
    obs = ep.first
    for a in walk:
        t = time.perf_counter()
        obs = await ep.step(a)
        walls.append(time.perf_counter() - t)
    await ep.close()
    if not obs.won:
        raise RuntimeError(f"walkthrough did not win through the pool: {path}")
    return ep.start_seconds, walls


async def pooled(games, repeats: int, workers: int | None, step_cache: str | None, parse_memo: bool) -> dict:
    out: dict = {}
    # the step cache, when on, lives in this process only (":memory:"): figures never depend on earlier runs
    async with EnginePool(workers, step_cache=step_cache, parse_memo=parse_memo, audit=0) as pool:
        t = time.perf_counter()
        await asyncio.gather(*(play(pool, p, w) for p, w in games))  # first play: workers start, games reset
        out["warm"] = time.perf_counter() - t
        # one at a time: the cost of starting from cache and of a step, without contention
        starts, walls, s0 = [], [], dict(pool.stats)
        for p, w in games:
            start, ws = await play(pool, p, w)
            starts.append(start)
            walls += ws
        n = pool.stats["steps"] - s0["steps"]
        out["start_cached"] = starts
        out["step_wall"] = walls
        out["step_engine"] = (pool.stats["engine_step_seconds"] - s0["engine_step_seconds"]) / max(1, n)
        # the measured run: repeats x games, all at once
        s0 = dict(pool.stats)
        t = time.perf_counter()
        await asyncio.gather(*(play(pool, p, w) for _ in range(repeats) for p, w in games))
        out["wall"] = time.perf_counter() - t
        out["stats"] = {k: pool.stats[k] - s0[k] for k in pool.stats}
        out["workers"] = pool.n_workers
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(), help="folder holding json_2.1.1")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=4, help="games, spread over the split (default 4)")
    ap.add_argument("--repeats", type=int, default=3, help="episodes per game in the measured runs (default 3)")
    ap.add_argument("--workers", type=int, default=None, help="pool workers (default: os.cpu_count())")
    ap.add_argument("--no-step-cache", action="store_true", help="skip the run with the (in-memory) step cache")
    args = ap.parse_args()

    games = pick_games(args.data, args.split, args.games)
    n_ep = len(games) * args.repeats
    n_steps = sum(len(w) for _, w in games) * args.repeats
    print(f"engine: alfworld {A.engine_versions()['alfworld']}, textworld {A.engine_versions()['textworld']}; "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    print(f"{len(games)} games from {args.split} x {args.repeats} repeats = {n_ep} episodes, {n_steps} steps "
          f"(walkthroughs)")

    seq_wall, resets, rereset, seq_steps = sequential(games, args.repeats)
    plain = asyncio.run(pooled(games, args.repeats, args.workers, None, parse_memo=False))
    pool = asyncio.run(pooled(games, args.repeats, args.workers, None, parse_memo=True))
    cached = None if args.no_step_cache else asyncio.run(pooled(games, args.repeats, args.workers, ":memory:", True))
    memo = memo_steps(games)  # last: it changes this process for good

    seq_eps = n_ep / seq_wall
    print("\n(a) engine step (admissible commands on, no expert)")
    print(f"  in-process, plain TextWorld          {ms(mean(seq_steps))}  (median {ms(statistics.median(seq_steps))})")
    print(f"  in-process, parse memo               {ms(mean(memo))}")
    print(f"  pool, no parse memo: child engine    {ms(plain['step_engine'])}, round trip {ms(mean(plain['step_wall']))}")
    print(f"  pool (default): child engine         {ms(pool['step_engine'])}, round trip {ms(mean(pool['step_wall']))}")
    print("\n(b) starting an episode")
    print(f"  make_env + reset (fresh)             {ms(mean(resets))}  (min {ms(min(resets))}, max {ms(max(resets))})")
    print(f"  reset of an already-made env         {ms(mean(rereset))}")
    print(f"  pool, game already played (fork)     {ms(mean(pool['start_cached']))}  "
          f"(max {ms(max(pool['start_cached']))})")
    if cached:
        print(f"  pool + step cache (no process)       {ms(mean(cached['start_cached']))}")
    print(f"  first play of the {len(games)} games ({pool['workers']} workers start, resets)  {ms(pool['warm'])}")
    print("\n(c) replaying the walkthroughs")
    print(f"  sequential, one reset per episode    {seq_eps:6.2f} episodes/s   ({seq_wall:.1f} s)")
    rows = [("pool, plain steps", plain), ("pool (default: parse memo)", pool)]
    if cached:
        rows.append(("pool + step cache", cached))
    for name, r in rows:
        eps = n_ep / r["wall"]
        st = r["stats"]
        print(f"  {name:<36} {eps:6.2f} episodes/s   ({r['wall']:.1f} s)  x{eps / seq_eps:.1f}  "
              f"[forks {st['forks']:.0f}, resets {st['resets']:.0f}, step-cache hits {st['step_cache_hits']:.0f}]")
    print("\nnotes: the step cache answers (game, action history) prefixes already played, so identical "
          "replays cost no engine time;\n       real agents diverge, and then pay the plain pool's price "
          "from the first new action.")


if __name__ == "__main__":
    main()
