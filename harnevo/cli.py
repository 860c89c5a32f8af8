"""The `harnevo` command line: a thin typer app. It parses, calls the library and prints with rich.

Heavy modules (litellm, textworld, torch) are imported inside commands, so `harnevo --help` is instant.
Library errors (`HarnevoError`) become one line on stderr and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="harnevo: find agent harnesses by evolution, and apply them to frozen models.")
data_app = typer.Typer(no_args_is_help=True, help="ALFWorld game data: check what is found, generate games.")
harness_app = typer.Typer(no_args_is_help=True, help="Harness files: list the seeds, validate or show one.")
population_app = typer.Typer(no_args_is_help=True, help="The population of an evolution run: list, show, lineage, diff, export.")
app.add_typer(data_app, name="data")
app.add_typer(harness_app, name="harness")
app.add_typer(population_app, name="population")
from harnevo.cli_train import train_app  # noqa: E402
app.add_typer(train_app, name="train")


def _parse_price(price: Optional[str]) -> Optional[tuple[float, float]]:
    from harnevo.errors import HarnevoError

    if price is None:
        return None
    try:
        parts = [float(x) for x in price.split(",")]
    except ValueError:
        raise HarnevoError(f"--price {price!r}: expected 'PROMPT,COMPLETION' USD per million tokens") from None
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or min(parts) < 0:
        raise HarnevoError(f"--price {price!r}: expected 'PROMPT,COMPLETION' USD per million tokens")
    return (parts[0], parts[1])


@app.command()
def apply(
    harness: str = typer.Argument(..., help="a harness YAML file, a seed name (react, bpe_always_on, ...) or RUN:best; "
                                  "H1,H2: the harness x model grid"),
    model: str = typer.Option("sim/bounded", "--model", "-m", help="sim/..., hf/<checkpoint dir>, or any litellm model; "
                              "a,b,c: the transfer table (one folder per pair under --out)"),
    split: Optional[str] = typer.Option(None, help="game split (valid_seen, valid_unseen, train, ... or generated); "
                                        "default valid_seen, or generated games when no official data is found"),
    games: Optional[int] = typer.Option(None, "--games", "-n", help="play a seeded sample of N games (default all)"),
    families: Optional[str] = typer.Option(None, help="task families, e.g. heat,cool (pick look clean heat cool pick2)"),
    concurrency: int = typer.Option(4, "--concurrency", "-c", help="episodes in flight at once"),
    out: Path = typer.Option(..., "--out", "-o", help="results folder (re-running into it resumes)"),
    data: Optional[Path] = typer.Option(None, help="folder holding json_2.1.1 (default $ALFWORLD_DATA)"),
    seed: int = typer.Option(0, help="seed of the game sample"),
    samples: int = typer.Option(1, help="episodes per game (distinct samples when temperature > 0)"),
    workers: Optional[int] = typer.Option(None, help="engine worker processes (default: one per core)"),
    api_base: Optional[str] = typer.Option(None, help="base URL of an OpenAI-compatible server (vLLM, ...)"),
    price: Optional[str] = typer.Option(None, help="USD per 1M tokens 'PROMPT,COMPLETION' for models litellm has no price for"),
    budget_usd: Optional[float] = typer.Option(None, help="stop starting episodes once this spend would be passed"),
    budget_tokens: Optional[int] = typer.Option(None, help="stop starting episodes once this many tokens would be passed"),
    no_cache: bool = typer.Option(False, "--no-cache", help="do not read or write the reply cache"),
    cache: Optional[Path] = typer.Option(None, help="reply cache file (default ~/.cache/harnevo/replies.sqlite)"),
    no_step_cache: bool = typer.Option(False, "--no-step-cache", help="do not read or write the engine's step cache"),
    step_cache: Optional[Path] = typer.Option(None, help="engine step cache file (default ~/.cache/harnevo/steps.sqlite)"),
    timeout: float = typer.Option(60.0, help="seconds per model call"),
    max_steps: Optional[int] = typer.Option(None, help="override the harness's step budget (gives a derived harness id)"),
    max_tokens: Optional[int] = typer.Option(None, help="override the harness's reply length in tokens"),
    cache_tag: Optional[str] = typer.Option(None, help="fingerprint of the served model in the reply-cache key "
                                            "(e.g. a checkpoint hash), or 'api_base' to key on the server address"),
    bank: Optional[Path] = typer.Option(None, help="Experience bank (experience.json) to start from, e.g. learned on train"),
    freeze_bank: bool = typer.Option(False, "--freeze-bank", help="read --bank, never change it (held-out evaluation)"),
    experience_lag: int = typer.Option(16, help="episode i reads lessons of episodes 0..i-LAG (same results at any "
                                       "concurrency; at most LAG episodes of a bank harness in flight)"),
) -> None:
    """Play ALFWorld games with MODEL under HARNESS and report how well it did."""
    from harnevo.runtime.apply import ApplyOptions, run_apply

    opts = ApplyOptions(harness=harness, model=model, split=split, games=games, families=families,
                        concurrency=concurrency, out=out, data=data, seed=seed, samples=samples, workers=workers,
                        api_base=api_base, price=_parse_price(price), budget_usd=budget_usd,
                        budget_tokens=budget_tokens, cache=None if no_cache else (cache or "default"),
                        timeout_s=timeout, max_steps=max_steps, max_tokens=max_tokens, cache_tag=cache_tag,
                        bank=bank, freeze_bank=freeze_bank, experience_lag=experience_lag,
                        step_cache=None if no_step_cache else (step_cache or "default"))
    if "," in harness or "," in model:  # several harnesses and/or models: the transfer table
        from harnevo.runtime.transfer import run_transfer

        run_transfer(opts)
        return
    run_apply(opts)


@data_app.command("check")
def data_check(data: Optional[Path] = typer.Option(None, help="folder holding json_2.1.1 (default $ALFWORLD_DATA)")) -> None:
    """Report the ALFWorld games found: games per split and family."""
    from harnevo.report.console import print_data_check

    print_data_check(data)


@data_app.command("generate")
def data_generate(
    out: Path = typer.Option(..., "--out", "-o", help="folder to write json_2.1.1/<split>/... into"),
    games: int = typer.Option(120, "--games", "-n", help="games to write, spread evenly over the families"),
    families: Optional[str] = typer.Option(None, help="task families, e.g. heat,cool (default all six)"),
    seed: int = typer.Option(0, help="same seed, same games, byte for byte"),
    scenes: Optional[str] = typer.Option(None, help="FloorPlan numbers to use, e.g. 1,2,301 (default all)"),
    split: str = typer.Option("generated", help="split folder name"),
    held_out: int = typer.Option(0, help="also write N games of an 'unseen' split on scenes the first split never uses"),
    workers: Optional[int] = typer.Option(None, help="processes checking games in the engine (default: cores)"),
) -> None:
    """Write new, engine-checked ALFWorld games (synthetic: harnevo's generator, not official data)."""
    import os

    from harnevo.envs.generate import generate, generate_held_out
    from harnevo.errors import HarnevoError

    try:
        scene_list = [int(x) for x in scenes.split(",")] if scenes else None
    except ValueError:
        raise HarnevoError(f"--scenes {scenes!r}: expected FloorPlan numbers like 1,2,301") from None
    n_workers = workers or os.cpu_count() or 1
    typer.echo(f"generating {games} synthetic ALFWorld games (seed {seed}) into {out} ...")
    if held_out:
        if scene_list:
            raise HarnevoError("--held-out chooses the scenes itself; drop --scenes")
        reports = generate_held_out(out, games, held_out, seed=seed, families=families, workers=n_workers,
                                    splits=(split, "unseen"))
    else:
        reports = (generate(out, games, families=families, seed=seed, scenes=scene_list, split=split,
                            workers=n_workers),)
    for r in reports:
        fams = ", ".join(f"{k} {v}" for k, v in sorted(r.families.items()))
        typer.echo(f"{r.split}: {r.games}/{r.requested} games ({fams}) in {r.seconds:.0f}s; "
                   f"discarded {r.n_discarded} draws ({100 * r.discard_rate:.1f}%: "
                   f"{', '.join(f'{k} {v}' for k, v in sorted(r.discards.items())) or 'none'}); "
                   f"scenes {len(r.scenes)}")
        if r.games < r.requested:
            raise HarnevoError(f"{r.split}: only {r.games} of {r.requested} games could be generated")


@harness_app.command("list")
def harness_list() -> None:
    """The seed harnesses shipped with harnevo, with their behaviour ids."""
    from harnevo.harness.spec import load_harness, seed_names

    for name in seed_names():
        h = load_harness(name)
        typer.echo(f"{name:16s} {h.behaviour_id}  mode={h.mode:9s} guard={h.guard:20s} "
                   f"{h.description.split('.')[0]}")


@harness_app.command("show")
def harness_show(harness: str = typer.Argument(..., help="a harness YAML file or a seed name")) -> None:
    """Validate a harness and print its canonical YAML with its id and behaviour id."""
    from harnevo.harness.spec import load_harness

    h = load_harness(harness)
    typer.echo(f"# id: {h.id}")
    typer.echo(f"# behaviour_id: {h.behaviour_id}")
    typer.echo(h.to_yaml())


@app.command()
def evolve(
    run_dir: Path = typer.Option(..., "--run-dir", help="the run's folder (population.sqlite, best.yaml); re-running resumes"),
    config: Optional[Path] = typer.Option(None, help="a YAML file of settings (the flags below override it)"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="model every candidate plays with (default sim/bounded)"),
    seeds: Optional[str] = typer.Option(None, help="seed harnesses, e.g. react,bpe_always_on,bpe_inline"),
    split: Optional[str] = typer.Option(None, help="games to evolve on (default valid_train, or the generated set)"),
    games: Optional[int] = typer.Option(None, "--games", "-n", help="a seeded sample of N games (default 48)"),
    families: Optional[str] = typer.Option(None, help="task families to keep, e.g. heat,cool"),
    data: Optional[Path] = typer.Option(None, help="folder holding json_2.1.1 (default $ALFWORLD_DATA)"),
    population: Optional[int] = typer.Option(None, help="candidates per generation (default 16)"),
    generations: Optional[int] = typer.Option(None, help="budget: generations after the seeds' (default 10)"),
    episodes: Optional[int] = typer.Option(None, help="budget: episodes played in all"),
    budget_tokens: Optional[int] = typer.Option(None, help="budget: tokens spent in all"),
    budget_usd: Optional[float] = typer.Option(None, help="budget: dollars spent in all"),
    seed: Optional[int] = typer.Option(None, help="the run's one seed (default 0)"),
    objectives: Optional[str] = typer.Option(None, help="success,tokens,meta (default) | success,cost | success"),
    search: Optional[str] = typer.Option(None, help="evolve (DEAP, default) or random (the baseline)"),
    no_racing: bool = typer.Option(False, "--no-racing", help="evaluate every candidate on every game"),
    minibatch: Optional[int] = typer.Option(None, help="games a new candidate plays before racing may stop it (default 12)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c", help="episodes in flight at once (default 8)"),
    workers: Optional[int] = typer.Option(None, help="engine worker processes (default: one per core)"),
    max_steps: Optional[int] = typer.Option(None, help="override every candidate's step budget"),
    api_base: Optional[str] = typer.Option(None, help="base URL of an OpenAI-compatible server"),
    price: Optional[str] = typer.Option(None, help="USD per 1M tokens 'PROMPT,COMPLETION'"),
    no_cache: bool = typer.Option(False, "--no-cache", help="do not read or write the reply cache"),
    cache_tag: Optional[str] = typer.Option(None, help="served-model fingerprint in the reply-cache key"),
    mutator_model: Optional[str] = typer.Option(None, help="reflective mutation: a model that rewrites text genes "
                                                "from failure evidence (any --model string)"),
    mutator_api_base: Optional[str] = typer.Option(None, help="base URL of the mutator's OpenAI-compatible server"),
) -> None:
    """Evolve harnesses: DEAP over harness programs, fitness = success on ALFWorld games, cost counted."""
    from harnevo.evolve.config import load_config
    from harnevo.evolve.run import run_evolve

    overrides = {"model": model, "seeds": seeds, "split": split, "games": games, "families": families,
                 "data": str(data) if data else None, "population": population, "generations": generations,
                 "episodes": episodes, "budget_tokens": budget_tokens, "budget_usd": budget_usd, "seed": seed,
                 "objectives": objectives, "search": search, "racing": False if no_racing else None,
                 "minibatch": minibatch, "concurrency": concurrency, "workers": workers, "max_steps": max_steps,
                 "api_base": api_base, "price": _parse_price(price), "cache_tag": cache_tag,
                 "mutator_model": mutator_model, "mutator_api_base": mutator_api_base}
    cfg = load_config(config, overrides)
    if no_cache:
        cfg = cfg.model_copy(update={"cache": None})
    run_evolve(cfg, run_dir)


@app.command()
def tune(
    harness: str = typer.Argument(..., help="the harness to tune: a seed name (bpe_always_on, ...) or a YAML file"),
    run_dir: Path = typer.Option(..., "--run-dir", help="the run's folder (population.sqlite holds the store and the "
                                 "Optuna study; best.yaml); re-running resumes"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="model every trial plays with (default sim/bounded)"),
    split: Optional[str] = typer.Option(None, help="games to tune on (default valid_train, or the generated set)"),
    games: Optional[int] = typer.Option(None, "--games", "-n", help="a seeded sample of N games (default 48)"),
    trials: Optional[int] = typer.Option(None, help="budget: trials in all (default 40; more on a re-run adds trials)"),
    objectives: Optional[str] = typer.Option(None, help="success (TPE, default) | success,tokens | success,cost (NSGA-II)"),
    seed: Optional[int] = typer.Option(None, help="seed of the games, race order and sampler (default 0)"),
    families: Optional[str] = typer.Option(None, help="task families to keep, e.g. heat,cool"),
    data: Optional[Path] = typer.Option(None, help="folder holding json_2.1.1 (default $ALFWORLD_DATA)"),
    no_pruning: bool = typer.Option(False, "--no-pruning", help="play every trial on every game"),
    minibatch: Optional[int] = typer.Option(None, help="games before the first pruning check (default 12)"),
    race_step: Optional[int] = typer.Option(None, help="games between pruning checks (default 12)"),
    max_steps: Optional[int] = typer.Option(None, help="most steps per episode: the step budget is tuned at or below it"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c", help="episodes in flight at once (default 8)"),
    workers: Optional[int] = typer.Option(None, help="engine worker processes (default: one per core)"),
    api_base: Optional[str] = typer.Option(None, help="base URL of an OpenAI-compatible server"),
    price: Optional[str] = typer.Option(None, help="USD per 1M tokens 'PROMPT,COMPLETION'"),
    no_cache: bool = typer.Option(False, "--no-cache", help="do not read or write the reply cache"),
    cache_tag: Optional[str] = typer.Option(None, help="served-model fingerprint in the reply-cache key"),
) -> None:
    """Tune the numeric and categorical genes of one harness with Optuna (TPE; NSGA-II for success and tokens)."""
    from harnevo.evolve.tune import parse_tune_config, print_summary, run_tune

    cfg = parse_tune_config({"harness": harness, "model": model, "split": split, "games": games, "trials": trials,
                             "objectives": objectives, "seed": seed, "families": families,
                             "data": str(data) if data else None, "pruning": False if no_pruning else None,
                             "minibatch": minibatch, "race_step": race_step, "max_steps": max_steps,
                             "concurrency": concurrency, "workers": workers, "api_base": api_base,
                             "price": _parse_price(price), "cache_tag": cache_tag})
    if no_cache:
        cfg = cfg.model_copy(update={"cache": None})
    print_summary(run_tune(cfg, run_dir))


@app.command()
def resume(run_dir: Path = typer.Argument(..., help="the run folder of an evolution run")) -> None:
    """Continue an evolution run where it stopped (killed, interrupted or out of budget), with its own config."""
    from harnevo.evolve.run import resume as resume_run

    summary = resume_run(run_dir)
    if summary.get("sampler"):  # a tune run
        from harnevo.evolve.tune import print_summary

        print_summary(summary)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="the run folder of an evolution run (finished or in progress)"),
           out: Optional[Path] = typer.Option(None, "--out", "-o", help="folder to write into (default RUN/report)")) -> None:
    """Write the report of an evolution run: one self-contained HTML page (RUN/report/index.html) and its PNGs."""
    from harnevo.report.run_report import print_written, write_report

    print_written(write_report(run_dir, out))


def _store(run_dir: Path):
    from harnevo.population.store import Store

    return Store.open(run_dir)


@population_app.command("list")
def population_list(run_dir: Path = typer.Option(..., "--run-dir", help="the run folder")) -> None:
    """Every harness of the run: behaviour id, generation, operator, parents, success."""
    from harnevo.report.population_view import print_population

    store = _store(run_dir)
    try:
        print_population(store)
    finally:
        store.close()


@population_app.command("show")
def population_show(harness_id: str = typer.Argument(..., help="a behaviour id (or a unique prefix)"),
                    run_dir: Path = typer.Option(..., "--run-dir")) -> None:
    """The canonical YAML of one harness of the run, with how it was made."""
    store = _store(run_dir)
    try:
        h = store.harness(harness_id)
        row = next(r for r in store.harness_rows() if r["behaviour_id"] == h.behaviour_id)
        typer.echo(f"# behaviour_id: {h.behaviour_id}  generation {row['generation']}  operator {row['operator']}  "
                   f"parents {','.join(row['parents']) or '-'}")
        typer.echo(h.to_yaml())
    finally:
        store.close()


@population_app.command("lineage")
def population_lineage(harness_id: str = typer.Argument(...), run_dir: Path = typer.Option(..., "--run-dir")) -> None:
    """The chain of ancestors of a harness back to its seed, with the operator of each step."""
    store = _store(run_dir)
    try:
        for r in store.lineage(store.harness(harness_id).behaviour_id):
            detail = r.get("detail") or {}
            genes = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in (detail.get("genes") or {}).items())
            typer.echo(f"gen {r['generation']:>3}  {r['behaviour_id']}  {r['operator']:<18} {genes}")
    finally:
        store.close()


@population_app.command("diff")
def population_diff(a: str = typer.Argument(...), b: Optional[str] = typer.Argument(None, help="default: A's first parent"),
                    run_dir: Path = typer.Option(..., "--run-dir")) -> None:
    """A unified diff of two harnesses' YAML (or of a harness against its first parent)."""
    from harnevo.errors import HarnevoError
    from harnevo.population.export import diff

    store = _store(run_dir)
    try:
        ha = store.harness(a)
        if b is None:
            row = next(r for r in store.harness_rows() if r["behaviour_id"] == ha.behaviour_id)
            if not row["parents"]:
                raise HarnevoError(f"{ha.behaviour_id} is a seed: give a second harness to diff against")
            b = row["parents"][0]
        typer.echo(diff(store, store.harness(b).behaviour_id, ha.behaviour_id))
    finally:
        store.close()


@population_app.command("export")
def population_export(harness_id: str = typer.Argument(...), run_dir: Path = typer.Option(..., "--run-dir"),
                      out: Path = typer.Option(..., "--out", "-o", help="the YAML file to write")) -> None:
    """Write one harness of the run as a harness file (and its learned bank beside it, if it has one)."""
    from harnevo.evolve.refs import export_with_bank

    for path in export_with_bank(run_dir, harness_id, out):
        typer.echo(f"wrote {path}")


def main() -> None:
    from harnevo.errors import HarnevoError

    try:
        app()
    except HarnevoError as e:
        print(f"harnevo: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("harnevo: interrupted; finished episodes are saved, re-run the same command to resume",
              file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
