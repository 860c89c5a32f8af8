"""The concurrent, resumable evaluator: one harness x one model x a set of games.

Episodes run as asyncio tasks, at most `concurrency` at once; model calls are awaited and the engine
runs in worker processes (EnginePool). Each finished episode is appended to `trajectories.jsonl` at
once (flushed and fsynced), so a run killed at any instant resumes without replaying or paying again
for finished episodes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harnevo.envs.games import Game
from harnevo.errors import BudgetExhausted, HarnevoError
from harnevo.files import atomic_write
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness
from harnevo.models.base import Model
from harnevo.models.cost import Budget, spend_of
from harnevo.runtime.episode import EngineLike, HarnessProgram, run_episode
from harnevo.runtime.summary import summarize
from harnevo.runtime.trajectory import Trajectory, episode_key

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
RUN = "run.json"
EXPERIENCE = "experience.json"


class ResultsDir:
    """The folder of one evaluation: run.json (what is evaluated), harness.yaml, trajectories.jsonl,
    experience.json and summary.json."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.trajectories = self.path / TRAJECTORIES

    def claim(self, identity: dict[str, Any], harness: Harness) -> None:
        """Create the folder, or check that it holds the same evaluation (same harness, model, split)."""
        self.path.mkdir(parents=True, exist_ok=True)
        run_file = self.path / RUN
        if run_file.is_file():
            try:
                old = json.loads(run_file.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                old = {}
            for k in ("harness_id", "model", "split"):
                if old.get(k) not in (None, identity[k]):
                    raise HarnevoError(f"{self.path} holds an evaluation with {k}={old.get(k)!r}, not "
                                       f"{identity[k]!r}; choose another --out")
        atomic_write(run_file, json.dumps(identity, indent=2))
        atomic_write(self.path / "harness.yaml", harness.to_yaml())

    def load(self) -> dict[str, Trajectory]:
        """Finished episodes by key. A torn last line (killed mid-write) is cut off."""
        if not self.trajectories.is_file():
            return {}
        raw = self.trajectories.read_bytes()
        if raw and not raw.endswith(b"\n"):
            cut = raw.rfind(b"\n") + 1
            with open(self.trajectories, "r+b") as f:
                f.truncate(cut)
            raw = raw[:cut]
        done: dict[str, Trajectory] = {}
        for line in raw.decode("utf-8").splitlines():
            if not line.strip():
                continue
            try:
                t = Trajectory.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError):
                continue
            done[t.key] = t
        return done

    def append(self, traj: Trajectory) -> None:
        line = json.dumps(traj.to_dict(), ensure_ascii=False) + "\n"
        with open(self.trajectories, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write(self.path / SUMMARY, json.dumps(summary, indent=2))


@dataclass
class EvalResult:
    summary: dict[str, Any]
    trajectories: list[Trajectory]
    played: int  # episodes played in this call (the rest were already in the folder)
    skipped: int
    stopped_by_budget: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


OnEpisode = Callable[[Trajectory, int, int], None]  # (trajectory, finished so far, total)


class BudgetedModel:
    """A model whose every call is reserved against a `Budget` first. Once the settled spend plus the
    calls in flight reach the limit, the next call raises BudgetExhausted: the episode making it is
    abandoned (not recorded, so a later run with more budget plays it), and so the spend can pass the
    limit by at most the calls that were already in flight."""

    def __init__(self, inner: Model, budget: Budget):
        self.inner, self.budget = inner, budget
        self.name, self.simulated = inner.name, inner.simulated

    async def complete(self, messages, **kw):
        estimate = self.budget.estimate()
        if self.budget.would_exceed(estimate):
            raise BudgetExhausted("the budget is reached")
        reservation = self.budget.reserve(estimate)
        try:
            reply = await self.inner.complete(messages, **kw)
        except BaseException:
            self.budget.release(reservation)
            raise
        self.budget.settle(reservation, spend_of(reply))
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()


async def evaluate(harness: Harness, model: Model, games: list[Game], engine: EngineLike, *,
                   out: str | os.PathLike, concurrency: int = 4, samples: int = 1,
                   header: dict[str, Any] | None = None, budget: Budget | None = None,
                   on_episode: OnEpisode | None = None) -> EvalResult:
    """Play every (game, sample) not already in `out`, then write summary.json over all of them.

    With a `budget`, no episode starts once it is reached, and an episode whose next call would pass
    it is abandoned unrecorded (see BudgetedModel); the summary says the run stopped at the budget."""
    if concurrency < 1:
        raise HarnevoError("--concurrency must be at least 1")
    results = ResultsDir(out)
    identity = {"harness_id": harness.id, "harness_name": harness.name, "model": model.name,
                "simulated": model.simulated, "split": games[0].split if games else "", **(header or {})}
    results.claim(identity, harness)
    done = results.load()
    bank = ExperienceBank(results.path / EXPERIENCE, size=harness.memory.experience_bank_size) \
        if harness.memory.experience else None
    program = HarnessProgram(harness)
    wanted = {episode_key(harness.id, model.name, g.split, g.name, s): (g, s) for g in games for s in range(samples)}
    todo = [gs for k, gs in wanted.items() if k not in done]
    finished = [t for k, t in done.items() if k in wanted]
    total = len(wanted)
    skipped = len(finished)
    sem = asyncio.Semaphore(concurrency)
    stopped = False
    if budget is not None:
        model = BudgetedModel(model, budget)
    t0 = time.perf_counter()

    async def one(game: Game, sample: int) -> None:
        nonlocal stopped
        async with sem:
            if stopped or (budget is not None and budget.would_exceed(budget.estimate())):
                stopped = True
                return
            try:
                traj = await run_episode(program, model, engine, game, sample=sample, bank=bank)
            except BudgetExhausted:
                stopped = True
                return
            results.append(traj)
            if bank is not None:
                bank.save()
            finished.append(traj)
            if on_episode is not None:
                on_episode(traj, len(finished), total)

    tasks = [asyncio.ensure_future(one(g, s)) for g, s in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    wall = time.perf_counter() - t0
    summary = summarize(sorted(finished, key=lambda t: t.key), **identity)
    summary["wall_seconds"] = wall
    summary["episodes_played_now"] = len(finished) - skipped
    summary["episodes_resumed"] = skipped
    summary["complete"] = len(finished) == total
    summary["stopped_by_budget"] = stopped
    if budget is not None:
        summary["budget"] = budget.snapshot()
    results.write_summary(summary)
    return EvalResult(summary=summary, trajectories=finished, played=len(finished) - skipped, skipped=skipped,
                      stopped_by_budget=stopped)
