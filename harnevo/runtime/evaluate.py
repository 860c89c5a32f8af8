"""The concurrent, resumable evaluator: one harness x one model x a set of games.

Episodes run as asyncio tasks, at most `concurrency` at once; model calls are awaited, templates render
in worker threads and the engine runs in worker processes (EnginePool). Each finished episode is appended
to `trajectories.jsonl` at once (flushed and fsynced) together with its Experience edits, so a run killed
at any instant resumes without replaying or paying again for finished episodes, and loses no lesson.

Honest outcomes: episodes recorded as `infra_error` are played again by the next run into the folder and
never count in the success rate. The Experience bank follows `BankSchedule` (runtime/bankorder.py), so
the outcome of every game is the same at any concurrency. Spend is kept in `budget.json`, so a budget
continues across invocations into the same folder."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from harnevo.envs.games import Game
from harnevo.errors import BudgetExhausted, HarnevoError
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness
from harnevo.models.base import Model, Usage
from harnevo.models.cost import Budget, spend_of
from harnevo.runtime.bankorder import DEFAULT_LAG, BankSchedule
from harnevo.runtime.episode import EngineLike, HarnessProgram, run_episode
from harnevo.runtime.results import BUDGET, EXPERIENCE, EXPERIENCE_BASE, ResultsDir
from harnevo.runtime.summary import summarize
from harnevo.runtime.trajectory import Trajectory, episode_key

__all__ = ["BudgetedModel", "EvalResult", "ResultsDir", "evaluate"]


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
                   on_episode: OnEpisode | None = None, bank: ExperienceBank | None = None,
                   freeze_bank: bool = False, experience_lag: int = DEFAULT_LAG) -> EvalResult:
    """Play every (game, sample) not already in `out` (and every recorded infra_error again), then write
    summary.json over all of them.

    `bank`: the Experience bank to start from (default: empty); `freeze_bank`: read it, never change it.
    With a `budget`, no episode starts once it is reached (spend of earlier invocations into `out`
    included), and an episode whose next call would pass it is abandoned unrecorded (see BudgetedModel)."""
    if concurrency < 1:
        raise HarnevoError("--concurrency must be at least 1")
    results = ResultsDir(out)
    results.lock()
    try:
        return await _evaluate(harness, model, games, engine, results, concurrency=concurrency, samples=samples,
                               header=header, budget=budget, on_episode=on_episode, bank=bank,
                               freeze_bank=freeze_bank, lag=experience_lag)
    finally:
        results.unlock()


async def _evaluate(harness, model, games, engine, results: ResultsDir, *, concurrency, samples, header, budget,
                    on_episode, bank, freeze_bank, lag) -> EvalResult:
    uses_bank = harness.memory.experience
    identity = {"harness_id": harness.id, "behaviour_id": harness.behaviour_id, "harness_name": harness.name,
                "model": model.name, "simulated": model.simulated, "split": games[0].split if games else "",
                **(header or {})}
    base, new_base = _base_bank(results, harness, bank) if uses_bank else (None, False)
    if base is not None:
        identity["experience"] = {"lag": lag, "frozen": freeze_bank, "start_bank": base.fingerprint(),
                                  "start_lessons": len(base.lessons)}
    results.claim(identity, harness.to_yaml())  # refuses another evaluation's folder before anything is written
    if new_base:
        base.save(results.path / EXPERIENCE_BASE)
    done = results.load()
    pairs = [(g, s) for g in games for s in range(samples)]
    order = [episode_key(harness.behaviour_id, model.name, g.split, g.name, s) for g, s in pairs]
    wanted = dict(zip(order, pairs))
    todo = [k for k in order if k not in done or not done[k].ok]
    finished = {k: done[k] for k in order if k in done and done[k].ok}
    infra_before = sum(1 for k in order if k in done and not done[k].ok)
    skipped = len(finished)
    schedule = None
    if base is not None:
        schedule = BankSchedule(base, order, lag=lag, frozen=freeze_bank)
        for k in todo:
            schedule.need(k)
        for k in order:
            if k in finished:
                schedule.settle(k, finished[k].bank_edits)
    budget = budget or Budget()
    prior = results.read_json(BUDGET) or {}
    budget.add(Usage(int(prior.get("spent_prompt_tokens", 0)), int(prior.get("spent_completion_tokens", 0)),
                     float(prior.get("spent_usd", 0.0))))
    invocations = int(prior.get("invocations", 0)) + 1
    model = BudgetedModel(model, budget)
    program = HarnessProgram(harness)
    sem = asyncio.Semaphore(concurrency)
    stopped = False
    played: dict[str, Trajectory] = {}
    t0 = time.perf_counter()

    def save_budget() -> None:
        s = budget.spent
        results.write_text(BUDGET, json.dumps({
            "spent_usd": s.cost_usd, "spent_prompt_tokens": s.prompt_tokens,
            "spent_completion_tokens": s.completion_tokens, "invocations": invocations,
            "limit_usd": budget.limit_usd, "limit_tokens": budget.limit_tokens}, indent=2))

    def save_bank() -> None:
        if schedule is not None and not freeze_bank:
            results.write_text(EXPERIENCE, schedule.bank.to_json())

    async def one(key: str) -> None:
        nonlocal stopped
        game, sample = wanted[key]
        snapshot = await schedule.snapshot_for(key) if schedule is not None else None
        if schedule is not None and snapshot is None:
            return  # stopped while waiting for earlier episodes
        async with sem:
            if stopped or budget.would_exceed(budget.estimate()):
                stopped = True
                if schedule is not None:
                    schedule.abort()
                return
            try:
                traj = await run_episode(program, model, engine, game, sample=sample, bank=snapshot)
            except BudgetExhausted:
                stopped = True
                if schedule is not None:
                    schedule.abort()
                return
            results.append(traj)
            played[key] = traj
            if traj.ok:
                finished[key] = traj
            if schedule is not None and schedule.settle(key, traj.bank_edits if traj.ok else []):
                save_bank()
            save_budget()
            if on_episode is not None:
                on_episode(traj, len(finished) + sum(not t.ok for t in played.values()), len(order))

    tasks = [asyncio.ensure_future(one(k)) for k in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        save_budget()
    save_bank()
    wall = time.perf_counter() - t0
    recorded = {**{k: t for k, t in done.items() if k in wanted}, **played}
    summary = summarize([recorded[k] for k in order if k in recorded], **identity)
    infra_now = sum(not t.ok for t in played.values())
    summary.update({
        "wall_seconds": wall,
        "episodes_played_now": len(played),
        "episodes_resumed": skipped,
        "infra_errors_replayed": infra_before,
        "complete": len(finished) == len(order),
        "stopped_by_budget": stopped,
        "budget": {**budget.snapshot(), "invocations": invocations},
    })
    if infra_now:
        summary["note"] = (f"{infra_now} episode(s) hit an infrastructure error and are not counted; "
                           f"re-run the same command to play them again")
    results.write_summary(summary)
    return EvalResult(summary=summary, trajectories=[finished[k] for k in order if k in finished],
                      played=len(played), skipped=skipped, stopped_by_budget=stopped)


def _base_bank(results: ResultsDir, harness: Harness, bank: ExperienceBank | None) -> tuple[ExperienceBank, bool]:
    """The bank this evaluation starts from: the one given, else the one recorded in the folder by an
    earlier invocation, else an empty one; and whether it is to be recorded. A given bank must match a
    recorded one."""
    size = harness.memory.experience_bank_size
    stored_file = results.path / EXPERIENCE_BASE
    stored = ExperienceBank(stored_file, size=size) if stored_file.is_file() else None
    if bank is None:
        return (stored.snapshot() if stored is not None else ExperienceBank(None, size=size)), False
    given = bank.snapshot().resized(size)
    if stored is not None and stored.fingerprint() != given.fingerprint():
        raise HarnevoError(f"{results.path} was started from another Experience bank "
                           f"({stored.fingerprint()}, not {given.fingerprint()}); choose another --out")
    return given, stored is None
