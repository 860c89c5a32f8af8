"""Evaluating candidates for an evolution run: every candidate of a generation at once, episodes of
different harnesses in flight together (at most `concurrency`), one engine pool, every finished episode
committed to the store as it finishes, and racing.

Racing: games are played in one fixed, family-stratified order (`racing.race_order`), the same for every
candidate. A new candidate plays the first `minibatch` games; after that and after every further
`race_step` games it goes on only while `racing.should_continue` says that its success over all games could
still put it on the front (`Bar`, fixed at the start of the generation, so racing decisions do not depend
on which candidate finished first):
  dominance  if front members are at least as cheap as the candidate on every cost objective (its costs
             so far against theirs on the same games), the upper bound of its success must *exceed* their best success: at
             best a tie with a member at least as cheap is weak domination, which gains the front nothing
             (with `objectives: [success]` every member counts, so it must be able to beat the best);
  floor      and, however cheap it is, the upper bound must reach the front's best success less
             `race_margin` (default 0.1): a cheap candidate far below the best is not worth all the games.
The floor is also a selection rule, raced or not: a candidate that played every game and ended below it
does not survive (`Evolution._select`), so racing changes how many episodes are played, not who survives
(up to its statistical early stops).

Episodes already in the store are never played again (a resumed run, or a child whose behaviour id was
seen before); `infra_error` episodes are played again and never counted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from harnevo.envs.games import Game
from harnevo.errors import BudgetExhausted
from harnevo.evolve.racing import EPS, RacePlan, should_continue
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness
from harnevo.runtime.bankorder import BankSchedule
from harnevo.runtime.episode import HarnessProgram, run_episode
from harnevo.runtime.summary import wilson_rate
from harnevo.runtime.trajectory import episode_key

COST_KEYS = {"tokens": "tokens_per_episode", "cost": "cost_per_episode", "meta": "meta_per_episode"}


@dataclass
class CandidateStats:
    behaviour_id: str
    games: int = 0  # ok episodes counted
    successes: int = 0
    infra_errors: int = 0
    tokens: float = 0.0
    cost: float = 0.0
    meta: float = 0.0
    complete: bool = False  # played every game (not stopped by racing)
    stopped_early: bool = False

    @property
    def success(self) -> float:
        return self.successes / self.games if self.games else 0.0

    def as_dict(self) -> dict[str, Any]:
        lo, hi = wilson_rate(self.success, self.games)
        n = max(self.games, 1)
        return {"behaviour_id": self.behaviour_id, "success": self.success, "ci95": [lo, hi], "games": self.games,
                "tokens_per_episode": self.tokens / n, "cost_per_episode": self.cost / n,
                "meta_per_episode": self.meta / n, "complete": self.complete, "stopped_early": self.stopped_early,
                "infra_errors": self.infra_errors}


@dataclass
class Bar:
    """The current front, frozen for one generation: each member's success over all games and its cost
    values over the first n games of the race order (so that a candidate's costs after n games are compared
    with the members' costs on the same games, not with their average over all games); and the floor no
    candidate may fall below (the front's best success less the run's `race_margin`)."""

    members: list[tuple[float, Callable[[int], dict[str, float]]]] = field(default_factory=list)
    floor: float = 0.0

    @classmethod
    def of_front(cls, members: list[tuple[float, Callable[[int], dict[str, float]]]], margin: float) -> "Bar":
        best = max((s for s, _ in members), default=0.0)
        return cls(members, max(0.0, best - margin))

    def below_floor(self, success: float) -> bool:
        """Whether a success over every game falls below the floor (`Evolution._select` drops such
        candidates, raced or not): the complement of racing's floor check, with its tolerance."""
        return success < self.floor - EPS

    def dominating(self, costs: dict[str, float], played: int) -> float | None:
        """Best success among front members at most as costly as `costs` (a candidate's, after `played`
        games) on every cost objective over the same games (None when the candidate is cheaper than every
        member on some objective)."""
        found = [success for success, costs_at in self.members
                 if all(costs_at(played).get(k, 0.0) <= v + EPS for k, v in costs.items())]
        return max(found) if found else None

    def should_continue(self, successes: int, played: int, total: int, costs: dict[str, float]) -> bool:
        """Whether a candidate with these results after `played` games could still join the front (module
        docstring)."""
        if not should_continue(successes, played, total, self.floor):
            return False
        dominant = self.dominating(costs, played)
        return dominant is None or should_continue(successes, played, total, dominant, strict=True)


class CandidateEvaluator:
    def __init__(self, *, store, model, engine, order: list[Game], concurrency: int, racing: bool, minibatch: int,
                 race_step: int, objectives: list[str], experience_lag: int,
                 on_episode: Callable[[Any], None] | None = None, can_start: Callable[[], bool] | None = None):
        self.store, self.model, self.engine, self.order = store, model, engine, order
        self.sem = asyncio.Semaphore(concurrency)
        self.racing, self.plan = racing, RacePlan(minibatch, race_step)
        self.cost_objectives = [o for o in objectives if o != "success"]
        self.lag = experience_lag
        self.on_episode = on_episode
        self.can_start = can_start or (lambda: True)
        self.stopped_by_budget = False
        self.played_now = 0  # episodes played by this process
        self.episode_seconds = 0.0  # their wall time, and the time spent committing them to the store
        self.store_seconds = 0.0

    async def evaluate_all(self, harnesses: list[Harness], bar: Bar | None) -> dict[str, CandidateStats]:
        """Stats of every harness (by behaviour id); those already evaluated cost nothing."""
        unique = list({h.behaviour_id: h for h in harnesses}.values())
        results = await asyncio.gather(*(self.evaluate(h, bar) for h in unique))
        return {s.behaviour_id: s for s in results}

    async def evaluate(self, h: Harness, bar: Bar | None) -> CandidateStats:
        """Play `h` on the race order: everything without racing (or without a bar), else round by round
        while it could still reach the bar."""
        bid, name = h.behaviour_id, self.model.name
        keys = [episode_key(bid, name, g.split, g.name, 0) for g in self.order]
        done = self.store.episodes(bid, name)
        total = len(self.order)
        schedule = self._schedule(h, keys, done)
        program = HarnessProgram(h)
        stats = CandidateStats(bid)
        racing = self.racing and bar is not None
        checkpoints = self.plan.checkpoints(total) if racing else [total]
        played_upto = 0
        for target in checkpoints:
            todo = [i for i in range(played_upto, target) if not _ok(done.get(_row_key(self.order[i])))]
            await asyncio.gather(*(self._play(program, i, keys, schedule) for i in todo))
            if self.stopped_by_budget:
                break
            played_upto = target
            done = self.store.episodes(bid, name)
            self._count(stats, done, target)
            if target >= total:
                stats.complete = stats.infra_errors == 0
                break
            costs = {k: v for k, v in self._costs(stats).items() if k in self.cost_objectives}
            if not bar.should_continue(stats.successes, stats.games, total, costs):
                stats.stopped_early = True
                break
        return stats

    def _schedule(self, h: Harness, keys: list[str], done: dict) -> BankSchedule | None:
        if not h.memory.experience:
            return None
        sched = BankSchedule(ExperienceBank(None, size=h.memory.experience_bank_size), keys, lag=self.lag)
        for k in keys:
            sched.need(k)
        for game, k in zip(self.order, keys):
            row = done.get(_row_key(game))
            if _ok(row):
                sched.settle(k, row.bank_edits)
        return sched

    async def _play(self, program: HarnessProgram, i: int, keys: list[str], schedule: BankSchedule | None) -> None:
        game, key = self.order[i], keys[i]
        snapshot = await schedule.snapshot_for(key) if schedule is not None else None
        if schedule is not None and snapshot is None:
            return
        async with self.sem:
            if self.stopped_by_budget or not self.can_start():
                self._stop(schedule)
                return
            try:
                traj = await run_episode(program, self.model, self.engine, game, sample=0, bank=snapshot)
            except BudgetExhausted:
                self._stop(schedule)
                return
        t0 = time.perf_counter()
        self.store.record_episode(traj, model=self.model.name)
        self.store_seconds += time.perf_counter() - t0
        self.episode_seconds += traj.wall_seconds
        self.played_now += 1
        if schedule is not None:
            schedule.settle(key, traj.bank_edits if traj.ok else [])
        if self.on_episode is not None:
            self.on_episode(traj)

    def _stop(self, schedule: BankSchedule | None) -> None:
        self.stopped_by_budget = True
        if schedule is not None:
            schedule.abort()

    def _count(self, stats: CandidateStats, done: dict, upto: int) -> None:
        stats.games = stats.successes = stats.infra_errors = 0
        stats.tokens = stats.cost = stats.meta = 0.0
        for game in self.order[:upto]:
            row = done.get(_row_key(game))
            if row is None:
                continue
            if row.status != "ok":
                stats.infra_errors += 1
                continue
            stats.games += 1
            stats.successes += int(row.success)
            stats.tokens += row.prompt_tokens + row.completion_tokens
            stats.cost += row.cost_usd
            stats.meta += row.meta_actions

    def costs_over(self, behaviour_id: str, upto: int) -> dict[str, float]:
        """A candidate's cost values (per ok episode) over the first `upto` games of the race order."""
        stats = CandidateStats(behaviour_id)
        self._count(stats, self.store.episodes(behaviour_id, self.model.name), upto)
        return {k: v for k, v in self._costs(stats).items() if k in self.cost_objectives}

    @staticmethod
    def _costs(stats: CandidateStats) -> dict[str, float]:
        d = stats.as_dict()
        return {k: d[v] for k, v in COST_KEYS.items()}

    def learned_bank(self, h: Harness) -> ExperienceBank | None:
        """The bank `h` learned on the games it played: its episodes' edits applied in race order."""
        if not h.memory.experience:
            return None
        bank = ExperienceBank(None, size=h.memory.experience_bank_size)
        done = self.store.episodes(h.behaviour_id, self.model.name)
        for game in self.order:
            row = done.get(_row_key(game))
            if _ok(row):
                bank.apply(row.bank_edits)
        return bank


def _row_key(game: Game) -> tuple[str, str, int]:
    return (game.split, game.name, 0)


def _ok(row: Any) -> bool:
    return row is not None and row.status == "ok"
