"""One validated config per training stage: `CollectConfig`, `SFTConfig`, `GRPOConfig`, `DistillConfig`.

Each is a pydantic model with `extra="forbid"` (a typo in a file is an error), read from an optional YAML
file with the CLI's flags laid over it (`load_config(cls, path, overrides)`); every failure is a
`HarnevoError` of one line naming the field. The SFT config has two profiles:

  qwen3-8b (the default)  EvoHarness-RL's harness SFT of Qwen3-8B: LoRA r=64, alpha=128 on all linear
                          layers, lr 1e-5, cosine schedule, 10% warm-up, 4 epochs, max length 4096,
                          effective batch 16 (per-device 2 x gradient accumulation 8 on one GPU)
  tiny                    the tests' profile: full fine-tune, lr 5e-3, batch 4, max length 1024, a step
                          limit, no warm-up; seconds on one CPU thread with a tiny random-init model

A profile fills the fields a file or a flag does not set: `SFTConfig.from_profile("tiny", lr=1e-3)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harnevo.errors import HarnevoError


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class GamesConfig(_Config):
    """Which games a stage plays: an official split (or 'generated' with --data), or N freshly generated
    games (`generate`, written once under the stage's output folder)."""

    split: str | None = Field(None, description="official split (train, valid_seen, valid_unseen) or a split "
                                                "folder under --data; default: generated games")
    data: Path | None = Field(None, description="folder holding json_2.1.1 (default $ALFWORLD_DATA)")
    games: int | None = Field(None, ge=1, description="a seeded sample of this many games (default: all)")
    generate: int | None = Field(None, ge=1, description="generate this many new games instead of a split")
    families: str | None = Field(None, description="task families, e.g. heat,cool")
    seed: int = Field(0, description="seed of the game sample / of the generator")

    @model_validator(mode="after")
    def _one_source(self) -> "GamesConfig":
        if self.generate is not None and self.split is not None:
            raise ValueError("give either split (official games) or generate (new games), not both")
        return self


class CollectConfig(GamesConfig):
    harness: str = Field(..., description="harness file, seed name or RUN_DIR:best")
    teacher: str = Field("expert", description="'expert' (ALFWorld's handcoded expert) or any --model string")
    out: Path = Field(..., description="dataset folder (re-running into it resumes)")
    samples: int = Field(1, ge=1, description="episodes per game (teachers with temperature > 0)")
    max_steps: int | None = Field(None, ge=1, le=500, description="override the harness's step budget")
    concurrency: int = Field(4, ge=1, description="episodes in flight at once")
    workers: int | None = Field(None, ge=1, description="engine worker processes (default: one per core)")
    api_base: str | None = Field(None, description="base URL of an OpenAI-compatible teacher server")
    keep_failed: bool = Field(False, description="also keep rows of lost episodes (default: wins only)")
    perturb: float = Field(0.0, ge=0.0, lt=1.0, description="expert only: chance per turn of a random admissible "
                                                            "'go to' instead of the plan (that turn gives no row)")

    @model_validator(mode="after")
    def _perturb_needs_expert(self) -> "CollectConfig":
        if self.perturb and self.teacher != "expert":
            raise ValueError("perturb applies to the expert teacher only")
        return self


SFTProfile = Literal["qwen3-8b", "tiny"]

_SFT_PROFILES: dict[str, dict[str, Any]] = {
    "qwen3-8b": dict(lora=True, lora_r=64, lora_alpha=128, lora_dropout=0.05, lora_target="all-linear", lr=1e-5,
                     scheduler="cosine", warmup_ratio=0.1, epochs=4.0, max_length=4096, batch_size=2,
                     grad_accum=8, max_steps=-1, gradient_checkpointing=True, bf16=None),
    "tiny": dict(lora=False, lora_r=8, lora_alpha=16, lora_dropout=0.0, lora_target="all-linear", lr=5e-3,
                 scheduler="constant", warmup_ratio=0.0, epochs=1.0, max_length=1024, batch_size=4, grad_accum=1,
                 max_steps=40, gradient_checkpointing=False, bf16=False),
}


class _TrainCommon(_Config):
    out: Path = Field(..., description="output folder: the checkpoint (re-running into it resumes)")
    seed: int = Field(0, description="seed of the trainer (data order, init of LoRA weights)")
    lora: bool = Field(False, description="train a LoRA adapter (peft) instead of every weight")
    lora_r: int = Field(64, ge=1, description="LoRA rank")
    lora_alpha: int = Field(128, ge=1, description="LoRA alpha")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="LoRA dropout")
    lora_target: str = Field("all-linear", description="'all-linear' or comma-separated module names")
    merge: bool = Field(True, description="with LoRA: save the merged model (what hf/<out> loads) besides the "
                                          "adapter in out/adapter")
    lr: float = Field(1e-5, gt=0.0, description="learning rate")
    scheduler: str = Field("cosine", description="learning-rate schedule (transformers' lr_scheduler_type)")
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0, description="fraction of steps spent warming up")
    batch_size: int = Field(2, ge=1, description="rows per device per step")
    grad_accum: int = Field(8, ge=1, description="gradient accumulation steps")
    max_steps: int = Field(-1, ge=-1, description="stop after this many optimizer steps (-1: by epochs)")
    logging_steps: int = Field(1, ge=1, description="log every N steps (loss, lr; rewards in GRPO)")
    save_steps: int = Field(50, ge=1, description="checkpoint every N steps (resume point)")
    gradient_checkpointing: bool = Field(False, description="trade compute for memory (GPUs)")
    bf16: bool | None = Field(None, description="bf16 training; default: on where the GPU supports it, off on CPU")

    @model_validator(mode="after")
    def _lora_consistent(self) -> "_TrainCommon":
        if not self.lora_target.strip():
            raise ValueError("lora_target is empty; give 'all-linear' or module names like q_proj,v_proj")
        return self

    def lora_targets(self) -> str | list[str]:
        t = self.lora_target.strip()
        return t if t == "all-linear" else [x.strip() for x in t.split(",") if x.strip()]


class SFTConfig(_TrainCommon):
    """Supervised fine-tuning on a collected chat dataset (loss on the assistant reply only)."""

    data: Path = Field(..., description="dataset folder written by `harnevo train collect` (or distill)")
    base: str = Field(..., description="base model: a local checkpoint dir, a hub id, or a .gguf file")
    profile: SFTProfile = Field("qwen3-8b", description="defaults for the fields not given (qwen3-8b or tiny)")
    epochs: float = Field(4.0, gt=0.0, description="passes over the dataset (max_steps overrides)")
    max_length: int = Field(4096, ge=16, description="longest row in tokens (longer rows are dropped, never cut)")

    @classmethod
    def from_profile(cls, profile: str = "qwen3-8b", **values: Any) -> "SFTConfig":
        return load_config(cls, None, {"profile": profile, **values})

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: Any) -> Any:
        if isinstance(data, dict):
            profile = data.get("profile", "qwen3-8b")
            if profile in _SFT_PROFILES:
                data = {**_SFT_PROFILES[profile], **data}
        return data


class RewardWeights(_Config):
    """The cost-aware reward (harnevo/train/rewards.py), EvoHarness-RL's defaults."""

    success: float = Field(10.0, ge=0.0, description="reward of a win")
    efficiency: float = Field(1.0, ge=0.0, description="weight of the efficiency term (wins only): 1 - steps/max")
    spam: float = Field(0.1, ge=0.0, description="charge per meta-action")
    spam_cap: int = Field(10, ge=0, description="meta-actions charged at most (calls beyond are free)")
    invalid: float = Field(0.1, ge=0.0, description="charge per invalid reply")


class GRPOConfig(_TrainCommon, GamesConfig):
    """Cost-aware GRPO with multi-turn rollouts in the engine under the harness."""

    init: str = Field(..., description="policy to start from: a checkpoint dir (e.g. the SFT output), hub id or .gguf")
    harness: str = Field(..., description="harness the policy plays under (file, seed or RUN_DIR:best)")
    num_generations: int = Field(4, ge=2, description="G: rollouts per game, all from the same start state")
    games_per_update: int = Field(2, ge=1, description="games per optimizer step (batch = games x G rollouts)")
    max_steps_episode: int | None = Field(None, ge=1, le=500, description="override the harness's step budget")
    max_tokens: int | None = Field(None, ge=1, description="override the harness's reply length (tokens per turn)")
    max_completion_length: int = Field(4096, ge=16, description="most tokens of one episode kept for the loss")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature of rollouts")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient against the initial policy (0: no reference model)")
    epsilon: float = Field(0.2, gt=0.0, description="PPO clip range")
    rewards: RewardWeights = RewardWeights()
    workers: int | None = Field(None, ge=1, description="engine worker processes")
    max_steps: int = Field(100, ge=1, description="optimizer steps (updates)")
    lr: float = Field(1e-6, gt=0.0, description="learning rate")
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0, description="fraction of steps spent warming up")
    scheduler: str = Field("constant", description="learning-rate schedule")
    batch_size: int = Field(0, ge=0, description="rollouts per device per step (0: games_per_update x G)")
    grad_accum: int = Field(1, ge=1, description="gradient accumulation steps")


class DistillConfig(GamesConfig):
    """Agent-as-harness distillation: a supervisor under the harness's rules corrects a student under `minimal`."""

    harness: str = Field(..., description="the harness whose rules the supervisor follows")
    supervisor: str = Field(..., description="the supervisor model (any --model string)")
    student: str = Field(..., description="the student model (hf/<dir>, sim/..., any --model string)")
    student_harness: str = Field("minimal", description="the harness the student acts under")
    out: Path = Field(..., description="dataset folder (re-running into it resumes)")
    max_steps: int | None = Field(None, ge=1, le=500, description="override the step budget of both harnesses")
    baseline: bool = Field(True, description="also play the student alone, for success with and without the supervisor")
    concurrency: int = Field(2, ge=1, description="episodes in flight at once")
    workers: int | None = Field(None, ge=1, description="engine worker processes")
    api_base: str | None = Field(None, description="base URL of an OpenAI-compatible server for the models")
    keep_failed: bool = Field(True, description="keep corrected rows of lost episodes too (every target is a "
                                                "supervisor-approved admissible action)")
    supervisor_executes: float = Field(1.0, ge=0.0, le=1.0,
                                       description="the chance per turn that the supervisor's command is the one "
                                                   "run; otherwise the student's own admissible command runs and "
                                                   "the supervisor's is only the row's target (DAgger; 1: always "
                                                   "the supervisor's)")


C = TypeVar("C", bound=BaseModel)


def load_config(cls: type[C], path: Path | str | None, overrides: dict[str, Any] | None = None) -> C:
    """`cls` from the YAML file at `path` (optional) with `overrides` (flags; None values dropped) on top."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise HarnevoError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise HarnevoError(f"{p}: not valid YAML: {' '.join(str(e).split())[:200]}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise HarnevoError(f"{p}: a config file is a YAML mapping, got {type(loaded).__name__}")
        data.update(loaded or {})
    for k, v in (overrides or {}).items():
        if v is not None:
            data[k] = v
    source = str(path) if path is not None else cls.__name__
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise HarnevoError(f"{source}: {first_error(e)}") from None


def first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    msg = " ".join(str(err["msg"]).split()).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"unknown key {field!r}"
    if err["type"] == "missing":
        return f"missing key {field!r}"
    return f"{field!r}: {msg}" if field else msg


__all__ = ["CollectConfig", "DistillConfig", "GRPOConfig", "GamesConfig", "RewardWeights", "SFTConfig",
           "load_config", "first_error"]
