"""Selection strategies over candidates, the first Pareto front and the "best" rule.

Candidates are behaviour ids, Harnesses or toolbox Individuals (anything with `.behaviour_id`); their
fitness is a tuple of values to maximise (success as is, costs negated: `fitness_values`), given as a
mapping by behaviour id or, for Individuals, read from `.fitness.values`. Every strategy draws its random
choices from the `random.Random` passed in and sorts its input by behaviour id first, so the result does
not depend on the order in which candidates finished. DEAP's `sortNondominated`, `assignCrowdingDist` and
`selNSGA2` are deterministic for a given input order and are used as they are; DEAP's tournaments draw
from the global `random` module, so the tournaments here are our own.

  tournament          `size` aspirants drawn with replacement, the fittest wins (parents, one objective)
  elitist_survivors   the `elite` fittest, then tournaments without replacement (survivors, one objective)
  crowded_tournament  binary tournament on (front rank, crowding distance) (parents, NSGA-II)
  nsga2_survivors     DEAP's selNSGA2 (survivors, NSGA-II)
Survivors are distinct candidates: a behaviour id appears at most once."""

from __future__ import annotations

import functools
import math
import random
from typing import Any, Mapping, Sequence, TypeVar

from deap import base, tools

from harnevo.errors import HarnevoError

T = TypeVar("T")
OBJECTIVES: dict[str, tuple[str, float]] = {  # name -> (stats key, sign in the fitness)
    "success": ("success", 1.0),
    "tokens": ("tokens_per_episode", -1.0),
    "cost": ("cost_per_episode", -1.0),
    "meta": ("meta_per_episode", -1.0),
}
MAX_OBJECTIVES = 3
TIE = 1e-9


class SearchConfigError(HarnevoError, ValueError):
    """A search setting that selection cannot work with, explained in one line."""


def check_objectives(objectives: Sequence[str]) -> tuple[str, ...]:
    """The objectives as a tuple, or a SearchConfigError: known names, each once, `success` among them,
    at most three."""
    objs = tuple(objectives)
    unknown = [o for o in objs if o not in OBJECTIVES]
    if unknown:
        raise SearchConfigError(f"unknown objective(s) {', '.join(map(str, unknown))}; choose from "
                                f"{', '.join(OBJECTIVES)}")
    if not objs or "success" not in objs or len(set(objs)) != len(objs):
        raise SearchConfigError("objectives name 'success' and each objective once, e.g. success,tokens,meta")
    if len(objs) > MAX_OBJECTIVES:
        raise SearchConfigError(f"at most {MAX_OBJECTIVES} objectives (tokens and cost both measure spend: "
                                f"choose one), got {','.join(objs)}")
    return objs


def fitness_values(objectives: Sequence[str], stats: Mapping[str, Any]) -> tuple[float, ...]:
    """Fitness values to maximise for these objectives: success as is, tokens/cost/meta per episode negated."""
    out = []
    for o in check_objectives(objectives):
        key, sign = OBJECTIVES[o]
        if key not in stats:
            raise SearchConfigError(f"objective {o!r} needs {key!r} in the candidate's stats")
        out.append(sign * float(stats[key]))
    return tuple(out)


# --- candidates and their fitness ---------------------------------------------------------------------------
def key_of(item: Any) -> str:
    return item if isinstance(item, str) else item.behaviour_id


def _fitness(items: Sequence[Any], fitness: Mapping[str, Sequence[float]] | None) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, ...]] = {}
    for item in items:
        k = key_of(item)
        if fitness is not None:
            if k not in fitness:
                raise ValueError(f"no fitness for candidate {k}")
            values = tuple(float(v) for v in fitness[k])
        else:
            if not item.fitness.valid:
                raise ValueError(f"candidate {k} has not been evaluated (fitness invalid)")
            values = tuple(item.fitness.values)
        if any(math.isnan(v) for v in values):
            raise ValueError(f"candidate {k} has a NaN fitness {values}")
        out[k] = values
    if len({len(v) for v in out.values()}) > 1:
        raise ValueError("candidates have fitness of different lengths")
    return out


def _unique(items: Sequence[T]) -> dict[str, T]:
    """First item of each behaviour id, in behaviour id order."""
    first: dict[str, T] = {}
    for item in items:
        first.setdefault(key_of(item), item)
    return {k: first[k] for k in sorted(first)}


@functools.lru_cache(maxsize=8)
def _fitness_type(n: int) -> type:
    """A DEAP Fitness of n maximised values, for ranking only (never pickled; see toolbox.py for those)."""
    return type(f"_RankFitness{n}", (base.Fitness,), {"weights": (1.0,) * n})


class _Ranked:
    __slots__ = ("key", "fitness")

    def __init__(self, key: str, values: tuple[float, ...]):
        self.key, self.fitness = key, _fitness_type(len(values))(values)


def _ranked(fit: Mapping[str, tuple[float, ...]]) -> list[_Ranked]:
    return [_Ranked(k, fit[k]) for k in sorted(fit)]


def _by_fitness(fit: Mapping[str, tuple[float, ...]], keys: Sequence[str]) -> list[str]:
    """Fittest first (lexicographic over the values), ties by behaviour id."""
    return sorted(keys, key=lambda k: (tuple(-v for v in fit[k]), k))


# --- fronts and the best --------------------------------------------------------------------------------------
def front_ids(fitness_by_id: Mapping[str, Sequence[float]]) -> list[str]:
    """The first non-dominated front of {behaviour id: fitness values}, fittest first (ties by id)."""
    if not fitness_by_id:
        return []
    fit = _fitness(list(fitness_by_id), fitness_by_id)
    first = tools.sortNondominated(_ranked(fit), len(fit), first_front_only=True)[0]
    return _by_fitness(fit, [r.key for r in first])


def front(individuals: Sequence[T], objectives: Sequence[str]) -> list[T]:
    """The first non-dominated front of these candidates over the named objectives, fittest first: from
    each candidate's `.stats` when it has them (any objectives), else from its fitness."""
    unique = _unique(individuals)
    fit = {}
    for k, item in unique.items():
        stats = getattr(item, "stats", None)
        fit[k] = fitness_values(objectives, stats) if stats is not None else _fitness([item], None)[k]
    return [unique[k] for k in front_ids(fit)]


def best_of(stats_by_id: Mapping[str, Mapping[str, Any]]) -> str:
    """The behaviour id of the best candidate. Rule: only candidates evaluated on the most games are
    eligible (a 3/3 run on a racing minibatch does not beat 120/140 on every game; on equal games the
    highest success is also the highest lower 95% bound, Wilson's bound growing with the rate); among them
    the highest success; ties (within 1e-9) go to fewer tokens per episode, then lower cost per episode,
    then fewer meta-actions per episode, then the smaller behaviour id. The best is therefore on the first
    front over success and tokens of the eligible candidates."""
    if not stats_by_id:
        raise ValueError("best_of needs at least one candidate")
    most = max(int(s.get("games", 0)) for s in stats_by_id.values())
    if most <= 0:
        raise ValueError("no candidate has played a game")
    pool = [k for k, s in stats_by_id.items() if int(s.get("games", 0)) == most]
    for key, sign in (("success", -1.0), ("tokens_per_episode", 1.0), ("cost_per_episode", 1.0),
                      ("meta_per_episode", 1.0)):
        scores = {k: sign * float(stats_by_id[k].get(key, 0.0)) for k in pool}
        top = min(scores.values())
        pool = [k for k in pool if scores[k] <= top + TIE]
    return min(pool)


# --- selection strategies -------------------------------------------------------------------------------------
def tournament(items: Sequence[T], fitness: Mapping[str, Sequence[float]] | None, k: int, rng: random.Random,
               size: int = 3) -> list[T]:
    """k winners of tournaments of `size` aspirants drawn with replacement (the first fittest wins)."""
    unique = _unique(items)
    if not unique:
        raise ValueError("selection from no candidates")
    fit = _fitness(list(unique.values()), fitness)
    keys = list(unique)
    out = []
    for _ in range(k):
        aspirants = [keys[rng.randrange(len(keys))] for _ in range(size)]
        out.append(unique[max(aspirants, key=lambda a: fit[a])])
    return out


def elitist_survivors(items: Sequence[T], fitness: Mapping[str, Sequence[float]] | None, k: int,
                      rng: random.Random, size: int = 3, elite: int = 2) -> list[T]:
    """The `elite` fittest (ties by behaviour id), then winners of tournaments of `size` drawn without
    replacement from the rest, until k distinct candidates (or all of them) are chosen."""
    unique = _unique(items)
    fit = _fitness(list(unique.values()), fitness)
    ranked = _by_fitness(fit, list(unique))
    chosen = ranked[: min(elite, k)]
    pool = [key for key in unique if key not in chosen]
    while len(chosen) < k and pool:
        aspirants = rng.sample(pool, min(size, len(pool)))
        winner = max(aspirants, key=lambda a: fit[a])
        chosen.append(winner)
        pool.remove(winner)
    return [unique[key] for key in chosen]


def _crowding(fit: Mapping[str, tuple[float, ...]]) -> dict[str, tuple[int, float]]:
    """{id: (front rank, crowding distance)} by DEAP's non-dominated sort and crowding distance."""
    ranked = _ranked(fit)
    out = {}
    for rank, fr in enumerate(tools.sortNondominated(ranked, len(ranked))):
        tools.emo.assignCrowdingDist(fr)
        for r in fr:
            out[r.key] = (rank, r.fitness.crowding_dist)
    return out


def crowded_tournament(items: Sequence[T], fitness: Mapping[str, Sequence[float]] | None, k: int,
                       rng: random.Random) -> list[T]:
    """k winners of binary tournaments by Deb's crowded comparison: the better front wins, then the larger
    crowding distance, then a coin from `rng`."""
    unique = _unique(items)
    if not unique:
        raise ValueError("selection from no candidates")
    crowd = _crowding(_fitness(list(unique.values()), fitness))
    keys = list(unique)
    out = []
    for _ in range(k):
        i = rng.randrange(len(keys))
        j = rng.randrange(len(keys) - 1) if len(keys) > 1 else 0
        j = j + 1 if len(keys) > 1 and j >= i else j  # two distinct aspirants
        a, b = keys[i], keys[j]
        (ra, ca), (rb, cb) = crowd[a], crowd[b]
        if ra != rb:
            win = a if ra < rb else b
        elif ca != cb:
            win = a if ca > cb else b
        else:
            win = a if rng.random() < 0.5 else b
        out.append(unique[win])
    return out


def nsga2_survivors(items: Sequence[T], fitness: Mapping[str, Sequence[float]] | None, k: int) -> list[T]:
    """DEAP's selNSGA2: whole fronts while they fit, then the least crowded of the next front; distinct
    candidates, in front order."""
    unique = _unique(items)
    fit = _fitness(list(unique.values()), fitness)
    chosen = tools.selNSGA2(_ranked(fit), min(k, len(fit)))
    return [unique[r.key] for r in chosen]


__all__ = ["OBJECTIVES", "SearchConfigError", "check_objectives", "fitness_values", "front", "front_ids", "best_of",
           "tournament", "elitist_survivors", "crowded_tournament", "nsga2_survivors", "key_of"]
