"""`harnevo apply`: resolve games, harness and model, run the evaluator with an engine pool, print."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.files import cache_root


@dataclass
class ApplyOptions:
    harness: str
    model: str
    out: Path
    split: str | None = None
    games: int | None = None
    families: str | None = None
    concurrency: int = 4
    data: Path | None = None
    seed: int = 0
    samples: int = 1
    workers: int | None = None
    api_base: str | None = None
    price: tuple[float, float] | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    cache: str | Path | None = "default"  # None: no cache
    step_cache: str | Path | None = "default"  # the engine's step cache (cache_root()/steps.sqlite); None: off
    timeout_s: float = 60.0
    max_steps: int | None = None  # override the harness's step budget (a derived harness, own id)
    max_tokens: int | None = None  # override the harness's reply length
    cache_tag: str | None = None  # served-model fingerprint in the reply-cache key ("api_base": the address)
    bank: Path | None = None  # Experience bank to start from (e.g. learned on train)
    freeze_bank: bool = False  # read the bank, never change it (held-out evaluation)
    experience_lag: int = 16  # episode i reads the lessons of episodes 0 .. i-lag (see runtime/bankorder.py)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise HarnevoError("--concurrency must be at least 1")
        if self.games is not None and self.games < 1:
            raise HarnevoError("--games must be at least 1")
        if self.samples < 1:
            raise HarnevoError("--samples must be at least 1")
        if self.experience_lag < 1:
            raise HarnevoError("--experience-lag must be at least 1")
        if self.freeze_bank and self.bank is None:
            raise HarnevoError("--freeze-bank needs --bank FILE (the bank to read)")


_ENGINE_STATS = ("episodes", "resets", "forks", "step_cache_hits", "step_cache_misses", "step_cache_mismatches",
                 "audits", "audit_errors", "worker_restarts", "errors")


def default_cache_path() -> Path:
    return cache_root() / "replies.sqlite"


def run_apply(opts: ApplyOptions) -> dict[str, Any]:
    from harnevo.files import FolderLock

    created = not opts.out.exists()
    try:
        with FolderLock(opts.out, "results folder"):  # before the slow setup: a second writer fails at once
            return _apply(opts)
    except BaseException:
        if created and [p.name for p in opts.out.iterdir()] == [".lock"]:  # bad input: leave no folder behind
            (opts.out / ".lock").unlink()
            opts.out.rmdir()
        raise


def _apply(opts: ApplyOptions) -> dict[str, Any]:
    from harnevo.envs.games import parse_families, resolve_games
    from harnevo.harness.spec import load_harness
    from harnevo.models import get_model
    from harnevo.report.console import EpisodeProgress, print_summary

    from harnevo.evolve.refs import is_run_ref, resolve

    run_bank = None
    if is_run_ref(opts.harness):  # RUN_DIR:best or RUN_DIR:<id>, with the bank it learned in the run
        harness, run_bank = resolve(opts.harness)
    else:
        harness = load_harness(opts.harness)
    if opts.max_steps is not None:
        harness = harness.evolve(budget={"max_steps": opts.max_steps})
    if opts.max_tokens is not None:
        harness = harness.evolve(model={"max_tokens": opts.max_tokens})
    families = parse_families(opts.families)
    games, source = resolve_games(opts.split, data=opts.data, families=families, n=opts.games, seed=opts.seed)
    cache = None
    if opts.cache is not None and not opts.model.startswith("sim/"):
        from harnevo.models.cache import ReplyCache

        cache = ReplyCache(default_cache_path() if opts.cache == "default" else Path(opts.cache))
    model = get_model(opts.model, api_base=opts.api_base, timeout_s=opts.timeout_s, price=opts.price, cache=cache,
                      cache_tag=opts.cache_tag)
    bank = None
    if opts.bank is not None:
        from harnevo.harness.experience import ExperienceBank

        if not opts.bank.is_file():
            raise HarnevoError(f"--bank {opts.bank}: no such file")
        if not harness.memory.experience:
            raise HarnevoError(f"--bank: harness {harness.name!r} keeps no Experience bank")
        bank = ExperienceBank(opts.bank, size=harness.memory.experience_bank_size)
    freeze = opts.freeze_bank
    if bank is None and run_bank is not None:
        bank, freeze = run_bank, True  # learned on the run's train games, read-only here
    budget = None
    if opts.budget_usd is not None or opts.budget_tokens is not None:
        from harnevo.models.cost import Budget

        budget = Budget(usd=opts.budget_usd, tokens=opts.budget_tokens)
    from harnevo.envs.alfworld import engine_versions

    header = {"data_source": source, "priced": bool(getattr(model, "priced", False)),
              "games_requested": opts.games, "families": families, "seed": opts.seed, "samples": opts.samples,
              "concurrency": opts.concurrency, **engine_versions()}
    progress = EpisodeProgress(title=f"{harness.name} x {model.name}"
                               f"{' (simulated)' if model.simulated else ''} on {games[0].split}",
                               total=len(games) * opts.samples)
    result = asyncio.run(_run(harness, model, games, opts, header, budget, progress, bank, freeze))
    print_summary(result.summary, out=opts.out)
    return result.summary


async def _run(harness, model, games, opts: ApplyOptions, header, budget, progress, bank, freeze):
    from harnevo.envs.pool import EnginePool
    from harnevo.runtime.evaluate import evaluate
    from harnevo.runtime.results import ResultsDir

    try:
        with progress:
            async with EnginePool(workers=opts.workers, step_cache=opts.step_cache) as pool:
                result = await evaluate(harness, model, games, pool, out=opts.out, concurrency=opts.concurrency,
                                        samples=opts.samples, header=header, budget=budget,
                                        on_episode=progress.update, bank=bank, freeze_bank=freeze,
                                        experience_lag=opts.experience_lag)
                result.summary["engine"] = {k: pool.stats[k] for k in _ENGINE_STATS if k in pool.stats}
                ResultsDir(opts.out).write_summary(result.summary)
                return result
    finally:
        await model.aclose()
