"""`harnevo train ...`: collect, sft, grpo, distill. Each reads one config (a YAML file via --config, the
flags laid over it; unknown keys are errors) and resumes when re-run into the same --out.

Nothing heavy is imported here: torch, transformers, TRL and the engine load inside the commands, so
`harnevo --help` stays instant and `apply`/`evolve` never need the training extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

train_app = typer.Typer(no_args_is_help=True,
                        help="Train a model on a harness: collect trajectories, SFT, cost-aware GRPO, supervisor "
                             "distillation (needs the `train` extra).")

_CONFIG = typer.Option(None, "--config", help="a YAML file of settings (the flags override it)")


def _need_extra() -> None:
    from harnevo.errors import HarnevoError

    try:
        import datasets  # noqa: F401
        import torch  # noqa: F401
        import trl  # noqa: F401
    except ImportError as e:
        raise HarnevoError(f"the training stage needs the `train` extra ({e.name} is missing): "
                           f"pip install 'harnevo[hf,train]'") from None


def _load(cls_name: str, config: Optional[Path], values: dict[str, Any]):
    from harnevo.train import config as cfgmod

    return cfgmod.load_config(getattr(cfgmod, cls_name), config, values)


def _echo_summary(summary: dict[str, Any], keys: tuple[str, ...]) -> None:
    for k in keys:
        if k in summary:
            typer.echo(f"{k}: {summary[k]}")


@train_app.command("collect")
def collect(
    harness: Optional[str] = typer.Option(None, help="harness file, seed name or RUN_DIR:best"),
    teacher: Optional[str] = typer.Option(None, help="'expert' (ALFWorld's handcoded expert, default) "
                                          "or a --model string"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="dataset folder (re-running into it resumes)"),
    split: Optional[str] = typer.Option(None, help="official split (train, valid_seen, ...); default: generated games"),
    data: Optional[Path] = typer.Option(None, help="folder holding json_2.1.1 (default $ALFWORLD_DATA)"),
    games: Optional[int] = typer.Option(None, "--games", "-n", help="a seeded sample of N games (default all)"),
    generate: Optional[int] = typer.Option(None, help="generate N new games instead of reading a split"),
    families: Optional[str] = typer.Option(None, help="task families, e.g. heat,cool"),
    seed: Optional[int] = typer.Option(None, help="seed of the game sample"),
    samples: Optional[int] = typer.Option(None, help="episodes per game"),
    max_steps: Optional[int] = typer.Option(None, help="override the harness's step budget"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c", help="episodes in flight at once"),
    workers: Optional[int] = typer.Option(None, help="engine worker processes"),
    api_base: Optional[str] = typer.Option(None, help="base URL of an OpenAI-compatible teacher server"),
    keep_failed: Optional[bool] = typer.Option(None, "--keep-failed/--wins-only", help="keep rows of lost episodes"),
    perturb: Optional[float] = typer.Option(None, help="expert only: chance per turn of a random admissible "
                                            "'go to' (no row for that turn; the expert recovers)"),
    config: Optional[Path] = _CONFIG,
) -> None:
    """Play games with a teacher under a harness; write the successful turns as a chat dataset."""
    _need_extra()
    from harnevo.train.collect import run_collect

    cfg = _load("CollectConfig", config, dict(harness=harness, teacher=teacher, out=out, split=split, data=data,
                                              games=games, generate=generate, families=families, seed=seed,
                                              samples=samples, max_steps=max_steps, concurrency=concurrency,
                                              workers=workers, api_base=api_base, keep_failed=keep_failed,
                                              perturb=perturb))
    s = run_collect(cfg, log=typer.echo)
    _echo_summary(s, ("success_rate", "rows", "tokens", "dataset"))


@train_app.command("sft")
def sft(
    data: Optional[Path] = typer.Option(None, help="dataset folder written by `train collect` or `train distill`"),
    base: Optional[str] = typer.Option(None, help="base model: a checkpoint dir, a hub id, or a .gguf file"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="checkpoint folder (re-running into it resumes)"),
    profile: Optional[str] = typer.Option(None, help="defaults: qwen3-8b (EvoHarness-RL's recipe) or tiny"),
    lora: Optional[bool] = typer.Option(None, "--lora/--full", help="train a LoRA adapter (merged into the output)"),
    lora_r: Optional[int] = typer.Option(None), lora_alpha: Optional[int] = typer.Option(None),
    lr: Optional[float] = typer.Option(None, help="learning rate"),
    epochs: Optional[float] = typer.Option(None), max_steps: Optional[int] = typer.Option(None),
    max_length: Optional[int] = typer.Option(None, help="longest row in tokens (longer rows are dropped)"),
    batch_size: Optional[int] = typer.Option(None), grad_accum: Optional[int] = typer.Option(None),
    save_steps: Optional[int] = typer.Option(None), seed: Optional[int] = typer.Option(None),
    config: Optional[Path] = _CONFIG,
) -> None:
    """Supervised fine-tuning (TRL SFTTrainer), loss on the assistant reply only."""
    _need_extra()
    from harnevo.train.sft import run_sft

    cfg = _load("SFTConfig", config, dict(data=data, base=base, out=out, profile=profile, lora=lora, lora_r=lora_r,
                                          lora_alpha=lora_alpha, lr=lr, epochs=epochs, max_steps=max_steps,
                                          max_length=max_length, batch_size=batch_size, grad_accum=grad_accum,
                                          save_steps=save_steps, seed=seed))
    s = run_sft(cfg, log=typer.echo)
    _echo_summary(s, ("first_loss", "last_loss", "written"))


@train_app.command("grpo")
def grpo(
    init: Optional[str] = typer.Option(None, help="policy to start from (e.g. the SFT output)"),
    harness: Optional[str] = typer.Option(None, help="harness the policy plays under"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="checkpoint folder (re-running into it resumes)"),
    split: Optional[str] = typer.Option(None), data: Optional[Path] = typer.Option(None),
    games: Optional[int] = typer.Option(None, "--games", "-n"), generate: Optional[int] = typer.Option(None),
    families: Optional[str] = typer.Option(None), seed: Optional[int] = typer.Option(None),
    num_generations: Optional[int] = typer.Option(None, "--num-generations", "-G", help="rollouts per game"),
    games_per_update: Optional[int] = typer.Option(None, help="games per optimizer step"),
    max_steps: Optional[int] = typer.Option(None, help="optimizer steps (updates)"),
    max_steps_episode: Optional[int] = typer.Option(None, help="override the harness's step budget"),
    max_tokens: Optional[int] = typer.Option(None, help="override the harness's reply length"),
    lr: Optional[float] = typer.Option(None), temperature: Optional[float] = typer.Option(None),
    beta: Optional[float] = typer.Option(None, help="KL coefficient (0: no reference model)"),
    lora: Optional[bool] = typer.Option(None, "--lora/--full"),
    workers: Optional[int] = typer.Option(None, help="engine worker processes"),
    save_steps: Optional[int] = typer.Option(None),
    config: Optional[Path] = _CONFIG,
) -> None:
    """Cost-aware GRPO (TRL GRPOTrainer) with multi-turn rollouts in the engine under the harness."""
    _need_extra()
    from harnevo.train.grpo import run_grpo

    cfg = _load("GRPOConfig", config, dict(init=init, harness=harness, out=out, split=split, data=data, games=games,
                                           generate=generate, families=families, seed=seed,
                                           num_generations=num_generations, games_per_update=games_per_update,
                                           max_steps=max_steps, max_steps_episode=max_steps_episode,
                                           max_tokens=max_tokens, lr=lr, temperature=temperature, beta=beta,
                                           lora=lora, workers=workers, save_steps=save_steps))
    s = run_grpo(cfg, log=typer.echo)
    _echo_summary(s, ("updates", "written"))


@train_app.command("distill")
def distill(
    harness: Optional[str] = typer.Option(None, help="the harness whose rules the supervisor follows"),
    supervisor: Optional[str] = typer.Option(None, help="the supervisor model"),
    student: Optional[str] = typer.Option(None, help="the student model (e.g. hf/<dir>)"),
    student_harness: Optional[str] = typer.Option(None, help="the student's harness (default minimal)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="dataset folder (re-running into it resumes)"),
    split: Optional[str] = typer.Option(None), data: Optional[Path] = typer.Option(None),
    games: Optional[int] = typer.Option(None, "--games", "-n"), generate: Optional[int] = typer.Option(None),
    families: Optional[str] = typer.Option(None), seed: Optional[int] = typer.Option(None),
    max_steps: Optional[int] = typer.Option(None, help="override the step budget"),
    baseline: Optional[bool] = typer.Option(None, "--baseline/--no-baseline", help="also play the student alone"),
    supervisor_executes: Optional[float] = typer.Option(
        None, help="chance per turn that the supervisor's command runs (default 1; below 1: DAgger, the student's "
                   "own command runs otherwise and the supervisor's is only the target)"),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", "-c"),
    workers: Optional[int] = typer.Option(None), api_base: Optional[str] = typer.Option(None),
    config: Optional[Path] = _CONFIG,
) -> None:
    """Supervisor distillation: a supervisor corrects the student's actions; corrected turns become SFT data."""
    _need_extra()
    from harnevo.train.distill import run_distill

    cfg = _load("DistillConfig", config, dict(harness=harness, supervisor=supervisor, student=student,
                                              student_harness=student_harness, out=out, split=split, data=data,
                                              games=games, generate=generate, families=families, seed=seed,
                                              max_steps=max_steps, baseline=baseline, concurrency=concurrency,
                                              workers=workers, api_base=api_base,
                                              supervisor_executes=supervisor_executes))
    s = run_distill(cfg, log=typer.echo)
    _echo_summary(s, ("intervention_rate", "success_with_supervisor", "success_student_alone", "rows", "dataset"))
