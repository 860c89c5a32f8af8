"""Racing: a new candidate plays a family-stratified minibatch first and goes on to the rest of the games
only while its success on all of them could still reach the bar (set from the current front: see `evolve/candidates.py`).

Order (`race_order`): the games sorted, grouped by task family, each family shuffled with the seed, then
interleaved so that every prefix holds each family in proportion to its share of the whole set (at each
position the family furthest below its share goes next; ties in a seeded family order). With equal
families this is plain round-robin; with unequal ones (valid_seen: 35 pick, 13 look) a prefix's success
rate estimates the rate over all games, which the bound below needs. Every candidate gets the same order.

Bound (`upper_bound`): after `played` of `total` games with `successes`, the candidate's success over all
`total` games is (successes + wins on the rest) / total. Two upper bounds hold and the smaller is used:
  hard         (successes + total - played) / total: it wins every game left. Never wrong.
  statistical  the upper end of Wilson's interval (two-sided, `confidence`, 95% like the reported
               intervals) for a proportion of a *finite* set of `total` games estimated from a sample of
               `played` of them: Wilson's interval with n_eff = played * (total - 1) / (total - played),
               the finite-population correction. Early (few played) it is wide, so racing is conservative;
               it narrows to the exact rate as played approaches total. (Mixing the exact part with
               Wilson's bound for the rest, successes/total + (1 - played/total) * upper, would be narrower
               by a factor sqrt(1 - played/total): too optimistic once many games are played.)
Each check risks about (1 - confidence) / 2 of stopping a candidate whose success over all games reaches
the bar; over the checks of a race the risks add up for a candidate right at the bar (140 games, minibatch
12, step 12: stopped about 18% of the time; a tie with a front member at least as cheap gains nothing) and
stay small above it (5 points above: about 3%; 10 points above: under 1%), while a candidate 15 points
below is stopped after 34 games on average (tests/test_racing.py measures these). For fewer wrong stops,
pass a higher `confidence` (e.g. 1 - 0.05 / checks). Against a plain bar a candidate that has won every
game so far is never stopped; against a member at least as cheap (`strict`, see `evolve/candidates.py`) a
candidate must be able to beat the member, not tie it: at 100% a tie is all it could reach, and it stops.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from statistics import NormalDist
from typing import Hashable, Sequence, TypeVar

from harnevo.runtime.summary import wilson_rate

G = TypeVar("G")
EPS = 1e-12


@dataclass(frozen=True)
class RacePlan:
    """Play `minibatch` games first, then continue in chunks of `step`, re-checking after each chunk."""

    minibatch: int
    step: int

    def __post_init__(self) -> None:
        for name in ("minibatch", "step"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"race {name} must be a whole number of at least 1, got {v!r}")

    def checkpoints(self, total: int) -> list[int]:
        """Games played at each check, the last being `total`: [minibatch, minibatch + step, ..., total]."""
        if total < 1:
            return []
        out = [min(self.minibatch, total)]
        while out[-1] < total:
            out.append(min(out[-1] + self.step, total))
        return out


def race_order(games: Sequence[G], seed: Hashable) -> list[G]:
    """Every game once, in the racing order described in the module docstring (games need `.family` and
    an order; the input order does not matter)."""
    rng = random.Random(seed)
    by_family: dict[str, list[G]] = defaultdict(list)
    for g in sorted(games):
        by_family[g.family].append(g)
    families = sorted(by_family)
    for f in families:
        rng.shuffle(by_family[f])
    tie_order = list(families)
    rng.shuffle(tie_order)
    total = sum(len(v) for v in by_family.values())
    taken = dict.fromkeys(families, 0)
    out: list[G] = []
    for position in range(1, total + 1):
        best, best_deficit = None, None
        for f in tie_order:
            n = len(by_family[f])
            if taken[f] >= n:
                continue
            deficit = position * n - taken[f] * total  # (share so far - taken) * total, in integers
            if best_deficit is None or deficit > best_deficit:
                best, best_deficit = f, deficit
        out.append(by_family[best][taken[best]])
        taken[best] += 1
    return out


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def upper_bound(successes: float, played: int, total: int, *, confidence: float = 0.95) -> float:
    """An upper confidence bound on the success rate over all `total` games (module docstring)."""
    if not (isinstance(total, int) and total >= 1 and 0 <= played <= total and 0 <= successes <= played):
        raise ValueError(f"racing needs 0 <= successes <= played <= total, total >= 1; got "
                         f"{successes}/{played} of {total}")
    z = _z(confidence)
    if played == total:
        return successes / total
    hard = (successes + total - played) / total
    if played == 0:
        return hard
    n_eff = played * (total - 1) / (total - played)
    statistical = wilson_rate(successes / played, n_eff, z)[1]  # type: ignore[arg-type]  # float n is fine
    return min(hard, statistical)


def should_continue(successes: float, played: int, total: int, bar: float, *, confidence: float = 0.95,
                    strict: bool = False) -> bool:
    """Whether a candidate with `successes` of `played` games should play more: games are left and the
    upper bound of its success over all `total` games reaches `bar` (with `strict`, exceeds it: a
    candidate that can at best tie a member at least as cheap is weakly dominated and cannot join the
    front)."""
    if not math.isfinite(bar):
        raise ValueError(f"the bar must be a number, got {bar}")
    if played >= total:
        upper_bound(successes, played, total, confidence=confidence)  # checks the arguments
        return False
    ub = upper_bound(successes, played, total, confidence=confidence)
    return ub > bar + EPS if strict else ub >= bar - EPS


__all__ = ["RacePlan", "race_order", "upper_bound", "should_continue"]
