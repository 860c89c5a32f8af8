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
app.add_typer(data_app, name="data")
app.add_typer(harness_app, name="harness")


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
    harness: str = typer.Argument(..., help="a harness YAML file or the name of a seed (react, bpe_always_on, ...)"),
    model: str = typer.Option("sim/bounded", "--model", "-m", help="sim/..., hf/<checkpoint dir>, or any litellm model"),
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
