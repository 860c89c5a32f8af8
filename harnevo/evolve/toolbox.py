"""DEAP behind one factory: `build_toolbox(config, rng)` registers the variation operators and the selection
strategies of one run, every random choice drawn from `rng`.

Registered on the toolbox (items are behaviour ids, Harnesses or Individuals; `fitness` maps behaviour id
to fitness values, or is None for Individuals, whose `.fitness` is read):
  individual(harness, origin=None)         -> Individual with an invalid fitness of the run's arity
  mutate(parent, ctx=None)                 -> (Child, invalid tries)            operators.mutate, mutation_steps
                                              mutations in a row
  mate(a, b, ctx=None)                     -> (Child, Child, invalid tries)     operators.crossover
  vary(parents)                            -> (children, invalid tries): consecutive pairs crossed with
                                              crossover_prob (a pair that cannot be crossed is not), then
                                              every child, or uncrossed parent, mutated with mutation_prob;
                                              a parent neither crossed nor mutated gives no child
  select_parents(items, fitness, k)        -> k parents (repeats allowed)
  select_survivors(items, fitness, k)      -> at most k distinct survivors; `select` is the same function
One objective (`success`): tournaments of `tournament_size` for parents; the `elite` fittest plus
tournaments without replacement for survivors. Several objectives: NSGA-II, binary crowded tournaments for
parents and DEAP's selNSGA2 for survivors (selection.py).

DEAP types: the fitness classes `creator.FitnessHarness1..3` (weights all +1.0: costs enter negated,
`fitness_values`) are created once, when this module is imported, guarded with hasattr; they pickle
through this module, so a worker process that unpickles one imports it and gets them. `Individual` is a
plain class of this module holding `.harness`, `.fitness`, `.stats` and `.origin` (the Child it came
from), not a list of genes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from deap import base, creator

from harnevo.evolve import selection
from harnevo.evolve.operators import DEFAULT, Child, OperatorContext, Registry, VariationError, crossover, mutate
from harnevo.evolve.selection import (SearchConfigError, best_of, check_objectives, fitness_values, front,
                                      front_ids, key_of)
from harnevo.harness.spec import Harness

NSGA2_MIN_POPULATION = 4


class _HarnessFitness(base.Fitness):
    """A DEAP Fitness that pickles through this module (`_fitness`), not by its `deap.creator` name."""

    weights: tuple[float, ...] = ()

    def __reduce__(self):
        extra = {k: v for k, v in vars(self).items() if k != "wvalues"}
        return (_fitness, (len(self.weights), tuple(self.values), extra))


for _n in range(1, selection.MAX_OBJECTIVES + 1):
    if not hasattr(creator, f"FitnessHarness{_n}"):
        creator.create(f"FitnessHarness{_n}", _HarnessFitness, weights=(1.0,) * _n)


def fitness_class(n: int) -> type:
    """The DEAP fitness class of n objectives."""
    if not 1 <= n <= selection.MAX_OBJECTIVES:
        raise SearchConfigError(f"fitness of {n} objectives: 1 to {selection.MAX_OBJECTIVES}")
    return getattr(creator, f"FitnessHarness{n}")


def _fitness(n: int, values: tuple[float, ...], extra: dict[str, Any]) -> base.Fitness:
    f = fitness_class(n)(values) if values else fitness_class(n)()
    f.__dict__.update(extra)
    return f


class Individual:
    """A candidate as DEAP sees it: a Harness, its fitness (invalid until evaluated), its stats and the
    Child record it came from (None for a seed)."""

    def __init__(self, harness: Harness, n_objectives: int = 1, origin: Child | None = None):
        self.harness = harness
        self.fitness = fitness_class(n_objectives)()
        self.origin = origin
        self.stats: dict[str, Any] | None = None

    @property
    def behaviour_id(self) -> str:
        bid = self.__dict__.get("_bid")
        if bid is None:
            bid = self.__dict__["_bid"] = self.harness.behaviour_id
        return bid

    def evaluated(self, objectives: Sequence[str], stats: Mapping[str, Any]) -> "Individual":
        """Set the stats and the fitness values they give for these objectives; returns self."""
        values = fitness_values(objectives, stats)
        if len(values) != len(self.fitness.weights):
            raise SearchConfigError(f"{len(values)} objectives for a fitness of {len(self.fitness.weights)}")
        self.stats = dict(stats)
        self.fitness.values = values
        return self

    def __repr__(self) -> str:
        values = self.fitness.values if self.fitness.valid else "unevaluated"
        return f"Individual({self.harness.name!r}, {self.behaviour_id}, {values})"


@dataclass(frozen=True)
class SearchSettings:
    """The settings `build_toolbox` reads (the loop's config has the same attributes)."""

    objectives: tuple[str, ...] = ("success", "tokens", "meta")
    population: int = 16
    tournament_size: int = 3
    elite: int = 2
    crossover_prob: float = 0.5
    mutation_prob: float = 1.0
    mutation_steps: int = 1


def check_settings(config: Any) -> tuple[str, ...]:
    """The objectives, or a one-line SearchConfigError for settings selection cannot work with."""
    objectives = check_objectives(config.objectives)
    pop, size, elite = config.population, config.tournament_size, config.elite
    for name, value in (("population", pop), ("tournament_size", size), ("elite", elite)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise SearchConfigError(f"{name} must be a whole number, got {value!r}")
    if pop < 1:
        raise SearchConfigError(f"population must be at least 1, got {pop}")
    if len(objectives) > 1 and pop < NSGA2_MIN_POPULATION:
        raise SearchConfigError(f"NSGA-II over {','.join(objectives)} needs a population of at least "
                                f"{NSGA2_MIN_POPULATION}, got {pop} (or use --objectives success)")
    if size < 1:
        raise SearchConfigError(f"tournament_size must be at least 1, got {size}")
    if not 0 <= elite < pop:
        raise SearchConfigError(f"elite ({elite}) must be at least 0 and smaller than the population ({pop})")
    steps = config.mutation_steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise SearchConfigError(f"mutation_steps must be a whole number of at least 1, got {steps!r}")
    for name in ("crossover_prob", "mutation_prob"):
        p = getattr(config, name)
        if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
            raise SearchConfigError(f"{name} must be between 0 and 1, got {p!r}")
    return objectives


def _harness(item: Any) -> Harness:
    return item.harness if isinstance(item, Individual) else item


def build_toolbox(config: Any, rng: random.Random, registry: Registry = DEFAULT) -> base.Toolbox:
    """A DEAP toolbox for one run (see the module docstring for what it registers). `config` is any
    object with objectives, population, tournament_size, elite, crossover_prob and mutation_prob."""
    objectives = check_settings(config)
    multi = len(objectives) > 1
    tb = base.Toolbox()
    tb.settings, tb.objectives, tb.multi_objective, tb.registry = config, objectives, multi, registry

    def individual(harness: Harness, origin: Child | None = None) -> Individual:
        return Individual(harness, len(objectives), origin)

    def mutate_(parent: Any, ctx: OperatorContext | None = None) -> tuple[Child, int]:
        return mutate(_harness(parent), rng, registry, ctx, steps=config.mutation_steps)

    def mate(a: Any, b: Any, ctx: OperatorContext | None = None) -> tuple[Child, Child, int]:
        return crossover(_harness(a), _harness(b), rng, registry, ctx)

    def vary(parents: Sequence[Any]) -> tuple[list[Child], int]:
        children: list[Child] = []
        invalid = 0
        hs = [_harness(p) for p in parents]
        groups: list[list[tuple[Harness, Child | None]]] = []
        for i in range(0, len(hs) - 1, 2):
            a, b = hs[i], hs[i + 1]
            pair: list[tuple[Harness, Child | None]] = [(a, None), (b, None)]
            if rng.random() < config.crossover_prob and key_of(a) != key_of(b):
                try:
                    c1, c2, n = crossover(a, b, rng, registry)
                    invalid += n
                    pair = [(c1.harness, c1), (c2.harness, c2)]
                except VariationError:
                    pass  # parents too alike to cross: mutation only
            groups.append(pair)
        if len(hs) % 2:
            groups.append([(hs[-1], None)])
        for group in groups:
            for h, child in group:
                if rng.random() < config.mutation_prob:
                    m, n = mutate(h, rng, registry, steps=config.mutation_steps)
                    invalid += n
                    child = m.after(child) if child is not None else m
                if child is not None:
                    children.append(child)
        return children, invalid

    if multi:
        def select_parents(items, fitness, k):
            return selection.crowded_tournament(items, fitness, k, rng)

        def select_survivors(items, fitness, k):
            return selection.nsga2_survivors(items, fitness, k)
    else:
        def select_parents(items, fitness, k):
            return selection.tournament(items, fitness, k, rng, config.tournament_size)

        def select_survivors(items, fitness, k):
            return selection.elitist_survivors(items, fitness, k, rng, config.tournament_size, config.elite)

    tb.register("individual", individual)
    tb.register("mutate", mutate_)
    tb.register("mate", mate)
    tb.register("vary", vary)
    tb.register("select_parents", select_parents)
    tb.register("select_survivors", select_survivors)
    tb.register("select", select_survivors)
    return tb


__all__ = ["build_toolbox", "SearchSettings", "check_settings", "Individual", "fitness_class", "fitness_values",
           "front", "front_ids", "best_of", "SearchConfigError"]
