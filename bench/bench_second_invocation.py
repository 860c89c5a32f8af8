"""A second `harnevo apply` on games an earlier one played: the step cache file carries over.

Two separate `harnevo apply` processes, two different harnesses (react, then bpe_always_on), the same
official games, and a model that answers instantly over HTTP (tests/fake_openai_server.py in this
process; it replies with each game's stored walkthrough, one action per turn, finding the game from
the task and room in the prompt and the turn from its "Step N of M" line). Both processes share one
step cache file (a fresh $HARNEVO_CACHE/steps.sqlite); the reply cache is off, so every turn is an
HTTP request. Measured in the same run:

  - a plain reset-per-episode TextWorld replay of the same actions, one process (the baseline);
  - apply #1 (react, cold: the file is empty);
  - apply #2 (bpe_always_on, the file apply #1 left);
  - apply #2' (bpe_always_on with an empty step cache file: what a second invocation got before
    the cache was kept on disk).

Episodes per second are given two ways: over the evaluation (the `wall_seconds` apply writes in
summary.json) and over the whole process (start to exit, imports and engine start included).

    python bench/bench_second_invocation.py [--data DIR] [--games 24] [--seed 0] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from fake_openai_server import TEST_API_KEY, FakeOpenAIServer  # noqa: E402

from harnevo.envs import alfworld as A  # noqa: E402
from harnevo.envs.games import load_games  # noqa: E402
from harnevo.envs.stepcache import StepCache  # noqa: E402
from harnevo.harness.task import split_first_observation  # noqa: E402

DEFAULT_DATA = Path(os.environ.get("ALFWORLD_DATA") or REPO.parent / "shared/alfworld")
_TASK = re.compile(r"Your task is to: (.*)")
_ROOM = re.compile(r"## Room\n(.*?)\n\n", re.S)
_STEP = re.compile(r"Step (\d+) of \d+\. Your reply:")


def walkthrough(path: str) -> list[str]:
    return json.loads(Path(path).read_text())["walkthrough"]


def plain_replay(games) -> tuple[float, dict[tuple[str, str], list[str]]]:
    """Episodes/s of make_env + reset + the walkthrough per episode, in this process; and the
    (task, room) -> walkthrough table the instant model answers from."""
    table: dict[tuple[str, str], list[str]] = {}
    t0 = time.perf_counter()
    for g in games:
        env = A.make_env(g.path)
        first = A.reset(env)
        obs = None
        for a in walkthrough(g.path):
            obs = A.step(env, a)
        env.close()
        if obs is None or not obs.won:
            raise SystemExit(f"the stored walkthrough does not win {g.name}")
        room, task = split_first_observation(first.text)
        if (task, room) in table:
            raise SystemExit(f"two games share task and room ({g.name}); pick another --seed")
        table[(task, room)] = walkthrough(g.path)
    return len(games) / (time.perf_counter() - t0), table


class WalkthroughModel:
    """The instant model: the walkthrough action for the game and turn found in the prompt."""

    def __init__(self, table: dict[tuple[str, str], list[str]]):
        self.table, self.unknown = table, 0

    def __call__(self, messages: list[dict]) -> str:
        text = str(messages[-1].get("content") or "")
        task, room, step = _TASK.search(text), _ROOM.search(text), _STEP.search(text)
        walk = self.table.get((task.group(1).strip(), room.group(1).strip())) if task and room else None
        if walk is None or step is None:
            self.unknown += 1
            return "Think: I do not know this game.\nAction: look"
        return f"Think: next step.\nAction: {walk[min(int(step.group(1)), len(walk)) - 1]}"


def apply(harness: str, out: Path, cache_home: Path, url: str, args) -> dict:
    cmd = [sys.executable, "-m", "harnevo.cli", "apply", harness, "--model", "openai/bench-walkthrough",
           "--api-base", url, "--split", args.split, "--games", str(args.games), "--seed", str(args.seed),
           "--data", str(args.data), "--out", str(out), "--no-cache", "--concurrency", str(args.concurrency)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    env = dict(os.environ, OPENAI_API_KEY=TEST_API_KEY, HARNEVO_CACHE=str(cache_home),
               LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO), COLUMNS="120")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"apply {harness} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    steps_file = cache_home / "steps.sqlite"
    entries = len(StepCache(steps_file)) if steps_file.exists() else 0
    return {"harness": harness, "process_s": wall, "eval_s": summary["wall_seconds"], "episodes": len(trajs),
            "won": sum(bool(t["success"]) for t in trajs), "actions": sum(t["env_actions"] for t in trajs),
            "no_reset": sum(bool(t["forked_from_cache"]) for t in trajs), "entries": entries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder holding json_2.1.1")
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--games", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0, help="seed of the game sample (apply's --seed)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--workers", type=int, default=None, help="engine workers of each apply (default: cores)")
    args = ap.parse_args()

    games = load_games(args.split, data=args.data, n=args.games, seed=args.seed)  # what apply will pick
    v = A.engine_versions()
    print(f"{len(games)} official {args.split} games (seed {args.seed}); alfworld {v['alfworld']}, textworld "
          f"{v['textworld']}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    plain, table = plain_replay(games)
    model = WalkthroughModel(table)
    with tempfile.TemporaryDirectory(prefix="harnevo-bench-") as tmp, FakeOpenAIServer(reply=model) as srv:
        tmp = Path(tmp)
        runs = [("apply #1  react, empty step cache", apply("react", tmp / "run1", tmp / "home", srv.url, args)),
                ("apply #2  bpe_always_on, the file #1 left", apply("bpe_always_on", tmp / "run2", tmp / "home",
                                                                   srv.url, args)),
                ("apply #2' bpe_always_on, empty step cache", apply("bpe_always_on", tmp / "run3", tmp / "cold",
                                                                   srv.url, args))]
        requests = srv.requests
    n = len(games)
    print(f"instant model over HTTP: {requests} requests, {model.unknown} not recognised")
    print(f"  plain TextWorld replay, one reset per episode, one process: {plain:6.2f} episodes/s")
    print(f"  {'':44} {'evaluation':>22} {'whole process':>26}   won  no reset  cache entries after")
    for name, r in runs:
        ev, pr = n / r["eval_s"], n / r["process_s"]
        print(f"  {name:<44} {ev:7.2f} ep/s ({ev / plain:5.1f}x) {r['eval_s']:5.1f} s "
              f"{pr:7.2f} ep/s ({pr / plain:5.1f}x) {r['process_s']:5.1f} s   {r['won']:2d}/{r['episodes']}"
              f"  {r['no_reset']:2d}        {r['entries']}")
    second = runs[1][1]
    ratio = n / second["eval_s"] / plain
    print(f"second invocation vs plain replay: {ratio:.1f}x over the evaluation, "
          f"{n / second['process_s'] / plain:.1f}x over the whole process (required: at least 8x)")


if __name__ == "__main__":
    main()
