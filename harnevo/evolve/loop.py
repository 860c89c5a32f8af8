"""The generation loop of `harnevo evolve`, resumable at any instant.

Generation 0: the seeds, evaluated on every game, then mutants of the seeds (raced) until the population
is full. Each later generation: offspring by crossover and mutation (DEAP toolbox, one `random.Random`
from the run's seed), evaluated together (racing against the front at the start of the generation), then
selection (NSGA-II over the objectives, or tournament with elitism for `success` alone) over parents and
offspring, raced-out candidates and those that ended below the floor excluded (`Evolution._select`), with or
without racing: racing decides early what full evaluation decides at the end. After every generation the population,
the front, the statistics and the RNG state are saved in the store in one transaction; every episode was
committed as it finished.

Resume: the last saved generation gives the population and the RNG state; the next generation's
offspring are derived again from them (so they are the same children), their episodes already in the
store are reused, and the run ends with the same population and front as a never-killed run."""

from __future__ import annotations

import functools
import random
from typing import Any, Callable

from harnevo.evolve.candidates import Bar, CandidateEvaluator
from harnevo.evolve.config import EvolveConfig
from harnevo.harness.spec import Harness

Event = Callable[[str, dict[str, Any]], None]


def fitness_of(stats: dict[str, Any], objectives: list[str]) -> tuple[float, ...]:
    """All objectives as values to maximise: success as is, costs negated (selection.fitness_values)."""
    from harnevo.evolve.selection import fitness_values

    return fitness_values(objectives, stats)


class Evolution:
    def __init__(self, cfg: EvolveConfig, store, evaluator: CandidateEvaluator, seeds: list[Harness],
                 on_event: Event | None = None, mutator=None):
        from harnevo.evolve.operators import DEFAULT
        from harnevo.evolve.toolbox import build_toolbox

        self.cfg, self.store, self.ev, self.seeds = cfg, store, evaluator, seeds
        self.rng = random.Random(cfg.seed)
        self.toolbox = build_toolbox(cfg, self.rng)
        self.mutator = mutator  # reflect.ReflectiveMutator or None: structural operators only
        self.registry = mutator.registry(DEFAULT, cfg.mutator_prob) if mutator is not None else DEFAULT
        self.on_event = on_event or (lambda kind, data: None)
        self.stats: dict[str, dict[str, Any]] = {}
        self.saved_by_racing = 0

    # --- helpers -------------------------------------------------------------------------------------------
    def _harness(self, bid: str) -> Harness:
        return self.store.harness(bid)

    def _front(self, ids: list[str]) -> list[str]:
        from harnevo.evolve.selection import front_ids

        complete = [b for b in ids if self.stats[b]["complete"]]
        return front_ids({b: fitness_of(self.stats[b], self.cfg.objectives) for b in (complete or ids)})

    def _bar(self, front: list[str]) -> Bar:
        members = [(self.stats[b]["success"], functools.lru_cache(maxsize=None)(functools.partial(self.ev.costs_over, b)))
                   for b in front]  # a member's costs over the first n games: read from the store once per n
        return Bar.of_front(members, self.cfg.race_margin)

    async def _evaluate(self, hs: list[Harness], bar: Bar | None) -> None:
        """Play `hs` (raced against `bar` when the run races) and record their statistics; a candidate that
        played every game and ended below the bar's floor is marked `below_floor` (see `_select`)."""
        got = await self.ev.evaluate_all(hs, bar)
        total = len(self.ev.order)
        saved = 0
        for bid, s in got.items():
            below = bar is not None and s.complete and bar.below_floor(s.success)
            self.stats[bid] = {**s.as_dict(), "below_floor": below}
            if s.stopped_early:
                saved += total - s.games - s.infra_errors
        if not self.ev.stopped_by_budget:  # a generation the budget cuts short is not saved and a resume with a
            self.saved_by_racing += saved  # larger budget replays it: its savings count there, once

    def _register(self, child, generation: int) -> Harness:
        self.store.add_harness(child.harness, parents=list(child.parents), operator=child.operator,
                               generation=generation, detail=child.detail)
        return child.harness

    # --- the run -------------------------------------------------------------------------------------------
    async def run(self) -> tuple[int, list[str], list[str], str]:
        from harnevo.population.store import rng_state_from_json, rng_state_to_json

        last = self.store.last_generation()
        if last is None:
            population = await self._generation_zero()
            gen = 0
            front = self._front(population)
            self._save(gen, population, front, rng_state_to_json)
        else:
            gen, population, front = last["generation"], list(last["population"]), list(last["front"])
            self.rng.setstate(rng_state_from_json(last["rng_state"]))
            self.stats.update(last["stats"]["candidates"])
            self.saved_by_racing = int(last["stats"].get("saved_by_racing", 0))
            if self.mutator is not None:
                self.mutator.restore(last["stats"].get("mutator"))
            self.on_event("resumed", {"generation": gen})
        while not self._should_stop(gen):
            gen += 1
            bar = self._bar(front)  # racing plays against it; without racing, only its floor counts (_select)
            offspring = await self._offspring(population, gen)
            self.on_event("generation_start", {"generation": gen, "candidates": len(offspring)})
            await self._evaluate(offspring, bar)
            if self.ev.stopped_by_budget:
                self.on_event("budget", {"generation": gen})
                break
            pool_ids = list(dict.fromkeys(population + [h.behaviour_id for h in offspring]))
            population = self._select(pool_ids)
            front = self._front(population)
            self._save(gen, population, front, rng_state_to_json)
        best = self.best(front)
        return gen, population, front, best

    async def _generation_zero(self) -> list[str]:
        from harnevo.evolve.operators import Child

        seeds = []
        for h in self.seeds:
            self._register(Child(h, (), "seed", {"seed": h.name}), 0)
            seeds.append(h)
        self.on_event("generation_start", {"generation": 0, "candidates": len(seeds)})
        await self._evaluate(seeds, None)  # the seeds play every game: they set the first bar
        ids = list(dict.fromkeys(h.behaviour_id for h in seeds))
        fill: list[Harness] = []
        tries = 0
        mutants = self.cfg.search == "evolve" and self.cfg.init == "mutants"  # else random search's draws
        while len(ids) + len(fill) < self.cfg.population and tries < 50 * self.cfg.population:
            tries += 1
            parent = seeds[len(fill) % len(seeds)] if mutants else None
            child = self._random_child() if parent is None else await self._mutate(parent, 0)
            if child.harness.behaviour_id in ids or any(c.behaviour_id == child.harness.behaviour_id for c in fill):
                continue
            fill.append(self._register(child, 0))
        await self._evaluate(fill, self._bar(self._front(ids)))
        return ids + [h.behaviour_id for h in fill]

    def _random_child(self):
        from harnevo.evolve.operators import random_harness

        return random_harness(self.rng, self.seeds)[0]

    async def _mutate(self, parent: Harness, gen: int):
        """One mutant of `parent`, `mutation_steps` mutations in a row (the reflective operator among them
        when the run has a mutator)."""
        from harnevo.evolve.operators import OperatorContext, amutate

        return (await amutate(parent, self.rng, self.registry, OperatorContext(generation=gen),
                              steps=self.cfg.mutation_steps))[0]

    async def _offspring(self, population: list[str], gen: int) -> list[Harness]:
        from harnevo.evolve.operators import VariationError, crossover

        seen = set(population)
        out: list[Harness] = []
        tries = 0
        parents = [self._harness(b) for b in population]
        fitness = {b: fitness_of(self.stats[b], self.cfg.objectives) for b in population}
        while len(out) < self.cfg.population and tries < 50 * self.cfg.population:
            tries += 1
            if self.cfg.search == "random":
                children = [self._random_child()]
            else:
                a, b = self.toolbox.select_parents(parents, fitness, 2)
                children = []
                if self.rng.random() < self.cfg.crossover_prob and a.behaviour_id != b.behaviour_id:
                    try:
                        c1, c2, _ = crossover(a, b, self.rng)
                        children = [c1, c2]
                        if self.rng.random() < self.cfg.mutation_prob:
                            children = [(await self._mutate(c.harness, gen)).after(c) for c in children]
                    except VariationError:  # parents too alike to cross: mutate instead
                        children = []
                if not children:
                    children = [await self._mutate(a, gen)]
            for child in children:
                bid = child.harness.behaviour_id
                if bid in seen or len(out) >= self.cfg.population:
                    continue
                seen.add(bid)
                out.append(self._register(child, gen))
        return out

    def _select(self, ids: list[str]) -> list[str]:
        """Survivors: the toolbox's selection among the candidates evaluated on every game; raced-out ones
        do not survive (as in irace, where eliminated configurations are dropped and new ones are sampled
        around the elites), so the population may hold fewer than `population` harnesses while few have
        been promoted. Racing stopped those because they could not join the front, and their statistics
        cover the first games of the race order only: ranked beside full evaluations, a cheap failing
        minibatch looks like a trade-off, and as parents they breed from harnesses that already lost.
        The same holds for a candidate that played every game and ended below the floor of its generation's
        bar (the front's best success less `race_margin`), with or without racing: racing only decides
        early what the full evaluation decides at the end, so `--no-racing` changes the episodes played,
        not the rule. (Without it, NSGA-II keeps cheap failures as the front's low-cost end: harnesses
        that give up within a few steps fill the population; see README, *Racing*.)"""
        fitness = {b: fitness_of(self.stats[b], self.cfg.objectives) for b in ids}
        full = [b for b in ids if not (self.stats[b].get("stopped_early") or self.stats[b].get("below_floor"))]
        full = full or ids
        return list(self.toolbox.select_survivors(full, fitness, min(self.cfg.population, len(full))))

    def _should_stop(self, gen: int) -> bool:
        knob, limit = self.cfg.budget_knob
        if knob == "generations":
            return gen >= limit
        if knob == "episodes":
            return self.store.episode_count() >= limit
        spent = self.store.spend()
        if self.mutator is not None:  # the mutator's spend counts in the same budget
            extra = self.mutator.spent()
            spent = {"tokens": spent["tokens"] + extra.prompt_tokens + extra.completion_tokens,
                     "usd": spent["usd"] + extra.cost_usd}
        return spent["tokens" if knob == "budget_tokens" else "usd"] >= limit

    def _save(self, gen: int, population: list[str], front: list[str], to_json) -> None:
        self.store.save_generation(gen, population=population, front=front, rng_state=to_json(self.rng.getstate()),
                                   stats={"candidates": {b: self.stats[b] for b in
                                                         dict.fromkeys(population + list(self.stats))},
                                          "saved_by_racing": self.saved_by_racing,
                                          "episodes": self.store.episode_count(),
                                          **({"mutator": self.mutator.stats.as_dict()} if self.mutator else {})})
        best = self.best(front)
        self.on_event("generation_end", {"generation": gen, "population": population, "front": front,
                                         "best": best, "best_stats": self.stats[best],
                                         "episodes": self.store.episode_count(),
                                         "saved_by_racing": self.saved_by_racing})

    def best(self, front: list[str]) -> str:
        from harnevo.evolve.selection import best_of

        return best_of({b: self.stats[b] for b in front})


__all__ = ["Evolution", "fitness_of"]
