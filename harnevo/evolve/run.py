"""`harnevo evolve` and `harnevo resume`: set up the store, games, model and engine pool, run the
generation loop, then export the best harness (with the Experience bank it learned on the train games)
and show the front.

The run directory:
    population.sqlite   the store (run config and versions, harnesses, evaluations, generations)
    best.yaml           the best harness of the final front (rule: toolbox.best_of)
    best.experience.json  its bank, learned on the train games (apply reads it frozen on held-out games)
    .lock               held while a process runs it (a second one exits 2)
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.evolve.config import EvolveConfig, parse_config

BEST = "best.yaml"
BEST_BANK = "best.experience.json"


def default_split(data: str | None) -> str:
    from harnevo.envs.games import GENERATED_SPLIT, find_data_root

    root = find_data_root(data)
    if root is None:
        return GENERATED_SPLIT
    return "valid_train" if (Path(root) / "json_2.1.1" / "valid_train").is_dir() else "train"


def run_evolve(cfg: EvolveConfig, run_dir: Path) -> dict[str, Any]:
    from harnevo.files import FolderLock

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise HarnevoError(f"--run-dir {run_dir} is a file, not a folder")
    created = not run_dir.exists()
    try:
        with FolderLock(run_dir, "run"):
            return asyncio.run(_run(cfg, run_dir))
    except BaseException:
        if created and [p.name for p in run_dir.iterdir()] == [".lock"]:  # bad input: leave no folder behind
            (run_dir / ".lock").unlink()
            run_dir.rmdir()
        raise


def resume(run_dir: Path) -> dict[str, Any]:
    from harnevo.population.store import Store

    run_dir = Path(run_dir)
    if not (run_dir / "population.sqlite").is_file():
        raise HarnevoError(f"{run_dir} holds no evolution run (no population.sqlite)")
    store = Store.open(run_dir)
    try:
        stored = dict(store.config())
    finally:
        store.close()
    if stored.get("command") == "tune":  # a `harnevo tune` run folder
        from harnevo.evolve.tune import resume_tune

        return resume_tune(run_dir)
    cfg = parse_config(stored, source=str(run_dir / "population.sqlite"))
    return run_evolve(cfg, run_dir)


def games_and_model(cfg) -> tuple[str, list, str, Any]:
    """What a search run (evolve or tune) plays: its split, the games in race order, where they came from,
    and the model (with the reply cache when asked, never for simulated agents)."""
    from harnevo.envs.games import parse_families, resolve_games
    from harnevo.evolve.racing import race_order
    from harnevo.models import get_model

    split = cfg.split or default_split(cfg.data)
    games, source = resolve_games(split, data=cfg.data, families=parse_families(cfg.families), n=cfg.games,
                                  seed=cfg.seed)
    cache = None
    if cfg.cache is not None and not cfg.model.startswith("sim/"):
        from harnevo.models.cache import ReplyCache
        from harnevo.runtime.apply import default_cache_path

        cache = ReplyCache(default_cache_path() if cfg.cache == "default" else Path(cfg.cache))
    model = get_model(cfg.model, api_base=cfg.api_base, timeout_s=cfg.timeout_s, price=cfg.price, cache=cache,
                      cache_tag=cfg.cache_tag)
    return split, race_order(games, cfg.seed), source, model


async def _run(cfg: EvolveConfig, run_dir: Path) -> dict[str, Any]:
    from harnevo.envs.alfworld import engine_versions
    from harnevo.envs.pool import EnginePool
    from harnevo.evolve.candidates import CandidateEvaluator
    from harnevo.evolve.loop import Evolution
    from harnevo.harness.genome import normalize
    from harnevo.harness.spec import load_harness
    from harnevo.population.store import Store
    from harnevo.report.evolve_view import EvolveView

    seeds = [normalize(load_harness(s)) for s in cfg.seeds]
    if cfg.max_steps is not None:
        seeds = [normalize(h.evolve(budget={"max_steps": cfg.max_steps})) for h in seeds]
    split, order, source, model = games_and_model(cfg)
    mutator_model, template = _mutator_model(cfg) if cfg.mutator_model else (None, None)
    import harnevo

    versions = {"harnevo": harnevo.__version__, **engine_versions(), "model": model.name,
                "simulated": model.simulated, "data_source": source, "split": split}
    store = Store.create(run_dir, cfg.to_json(), versions)
    view = EvolveView(cfg, total_games=len(order), model=model, source=source)
    budget = _budget(cfg, store)
    if budget is not None:
        from harnevo.runtime.evaluate import BudgetedModel

        model = BudgetedModel(model, budget)
        if mutator_model is not None:
            mutator_model = BudgetedModel(mutator_model, budget)
    mutator = None
    if mutator_model is not None:
        from harnevo.evolve.reflect import ReflectiveMutator

        mutator = ReflectiveMutator(mutator_model, store, model.name, template=template,
                                    max_tokens=cfg.mutator_max_tokens, failures=cfg.mutator_failures)
    t0 = time.perf_counter()
    try:
        async with EnginePool(workers=cfg.workers) as pool:
            ev = CandidateEvaluator(store=store, model=model, engine=pool, order=order, concurrency=cfg.concurrency,
                                    racing=cfg.racing, minibatch=cfg.minibatch, race_step=cfg.race_step,
                                    objectives=cfg.objectives, experience_lag=cfg.experience_lag,
                                    on_episode=view.episode, can_start=_episode_budget(cfg, store))
            evo = Evolution(cfg, store, ev, seeds, on_event=view.event, mutator=mutator)
            with view:
                gen, population, front, best = await evo.run()
            summary = _finish(cfg, store, evo, ev, run_dir, gen, population, front, best, time.perf_counter() - t0)
            write_summary(run_dir, summary)
    finally:
        await model.aclose()
        if mutator_model is not None:
            await mutator_model.aclose()
        store.close()
    view.final(summary)
    return summary


def _episode_budget(cfg: EvolveConfig, store):
    """With `--episodes N`: a check before each episode starts, so the run never plays more than N in all."""
    if cfg.episodes is None:
        return None
    left = [cfg.episodes - store.episode_count()]

    def can_start() -> bool:
        if left[0] <= 0:
            return False
        left[0] -= 1
        return True

    return can_start


def _budget(cfg: EvolveConfig, store):
    if cfg.budget_usd is None and cfg.budget_tokens is None:
        return None
    from harnevo.models.base import Usage
    from harnevo.models.cost import Budget

    b = Budget(usd=cfg.budget_usd, tokens=cfg.budget_tokens)
    spent = store.spend()
    b.add(Usage(int(spent["tokens"]), 0, float(spent["usd"])))
    last = store.last_generation()
    paid = (last["stats"].get("mutator") or {}) if last else {}  # the mutator's spend up to the last generation
    b.add(Usage(int(paid.get("tokens", 0)), 0, float(paid.get("usd", 0.0))))
    return b


def _mutator_model(cfg: EvolveConfig):
    """The reflective mutation's model (through the reply cache unless the run has none) and its template."""
    from harnevo.evolve.reflect import load_template
    from harnevo.models import get_model

    template = load_template(cfg.mutator_template)
    cache = None
    if cfg.cache is not None and not cfg.mutator_model.startswith("sim/"):
        from harnevo.models.cache import ReplyCache
        from harnevo.runtime.apply import default_cache_path

        cache = ReplyCache(default_cache_path() if cfg.cache == "default" else Path(cfg.cache))
    model = get_model(cfg.mutator_model, api_base=cfg.mutator_api_base, timeout_s=cfg.timeout_s, max_retries=2,
                      cache=cache)
    return model, template


def _finish(cfg, store, evo, ev, run_dir: Path, gen, population, front, best, wall) -> dict[str, Any]:
    from harnevo.files import atomic_write

    best_h = store.harness(best)
    atomic_write(run_dir / BEST, best_h.to_yaml())
    bank = ev.learned_bank(best_h)
    if bank is not None:
        atomic_write(run_dir / BEST_BANK, bank.to_json())
    rows = []
    for bid in front:
        r = next(x for x in store.harness_rows() if x["behaviour_id"] == bid)
        rows.append({**evo.stats[bid], "name": r["name"], "operator": r["operator"], "generation": r["generation"]})
    return {
        "run_dir": str(run_dir), "generations": gen, "population": population, "front": rows, "best": best,
        "best_yaml": str(run_dir / BEST), "best_bank": str(run_dir / BEST_BANK) if bank is not None else None,
        "store": str(store.path), "episodes_in_store": store.episode_count(),
        "episodes_played_now": ev.played_now, "episodes_saved_by_racing": evo.saved_by_racing,
        "store_seconds_per_episode": ev.store_seconds / max(1, ev.played_now),
        "episode_seconds_mean": ev.episode_seconds / max(1, ev.played_now),
        "wall_seconds": wall, "stopped_by_budget": ev.stopped_by_budget, "model": cfg.model,
        "simulated": cfg.model.startswith("sim/"), "objectives": cfg.objectives,
        **({"mutator": evo.mutator.summary()} if evo.mutator is not None else {}),
    }


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    from harnevo.files import atomic_write

    atomic_write(Path(run_dir) / "summary.json", json.dumps(summary, indent=2))
