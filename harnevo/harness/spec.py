"""The `Harness` value: a prompt program (named Jinja templates) with a memory policy, an action guard,
a mode, budgets and model settings. Loaded from one YAML file with a strict schema; frozen; identified
by the hash of its canonical form."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harnevo.errors import HarnessError

Mode = Literal["env_only", "always_on", "inline"]
Guard = Literal["none", "nearest_admissible", "reject"]
REQUIRED_TEMPLATES = ("system", "turn")
META_ACTIONS = ("track", "commit", "recall", "note")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class MemoryPolicy(_Frozen):
    """What the workspace keeps and shows. Panels are shown every turn in `always_on` mode and reached
    through meta-actions in `inline` mode; `env_only` shows none."""

    belief: bool = Field(False, description="keep a Belief of the world from observations")
    belief_scope: Literal["all", "task"] = Field(
        "all", description="all: every receptacle seen; task: only receptacles holding task-relevant objects")
    progress: bool = Field(False, description="keep subgoals of the task with their status")
    experience: bool = Field(False, description="carry lessons across episodes in an ExperienceBank")
    experience_bank_size: int = Field(20, ge=0, le=500, description="most lessons kept in the bank")
    experience_shown: int = Field(5, ge=0, le=50, description="most lessons shown or recalled at once")
    history_window: int = Field(8, ge=0, le=200, description="past steps shown in the turn message")


class Budget(_Frozen):
    max_steps: int = Field(50, ge=1, le=500, description="steps per episode")
    meta_actions_spend_budget: bool = Field(True, description="a meta-action costs a step like an action")


class ModelSettings(_Frozen):
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(256, ge=8, le=32768)


class Harness(_Frozen):
    """A frozen harness. Build with `Harness.from_yaml` / `load_harness`; never mutate (use `evolve`)."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    mode: Mode = "env_only"
    templates: dict[str, str]
    memory: MemoryPolicy = MemoryPolicy()
    guard: Guard = "none"
    budget: Budget = Budget()
    model: ModelSettings = ModelSettings()

    @field_validator("templates")
    @classmethod
    def _templates_present(cls, v: dict[str, str]) -> dict[str, str]:
        missing = [t for t in REQUIRED_TEMPLATES if t not in v]
        if missing:
            raise ValueError(f"missing template(s): {', '.join(missing)}")
        for k in v:
            if not k.replace("_", "").isalnum():
                raise ValueError(f"template name {k!r} must be letters, digits and underscores")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Harness":
        if self.mode != "env_only" and not (self.memory.belief or self.memory.progress or self.memory.experience):
            raise ValueError(f"mode {self.mode!r} needs at least one of memory.belief/progress/experience")
        return self

    # --- identity -------------------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """Every field, defaults included, keys sorted: two harnesses that behave alike hash alike."""
        return json.loads(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    @property
    def id(self) -> str:
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=100)

    def evolve(self, **changes: Any) -> "Harness":
        """A new harness with `changes` applied (nested sections as dicts), validated like a file."""
        data = self.model_dump(mode="json")
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "templates":
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        return Harness.from_dict(data, source=f"{self.name} (evolved)")

    # --- loading ----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<harness>") -> "Harness":
        if not isinstance(data, dict):
            raise HarnessError(f"{source}: a harness file must be a YAML mapping, got {type(data).__name__}")
        try:
            harness = cls.model_validate(data)
        except ValidationError as e:
            raise HarnessError(f"{source}: {_first_error(e)}") from None
        from harnevo.harness.render import check_templates  # render imports spec

        check_templates(harness, source=source)
        return harness

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<harness>") -> "Harness":
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise HarnessError(f"{source}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
        return cls.from_dict(data, source=source)


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "harness"
    if err["type"] == "extra_forbidden":
        return f"unknown field {field!r}"
    if err["type"] == "missing":
        return f"missing field {field!r}"
    return f"field {field!r}: {err['msg']}"


def seeds_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "harness_templates"


def seed_names() -> list[str]:
    return sorted(p.stem for p in seeds_dir().glob("*.yaml"))


def load_harness(ref: str | Path) -> Harness:
    """A harness from a YAML path or the name of a seed shipped with harnevo."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise HarnessError(f"harness file not found: {path}")
        return Harness.from_yaml(path.read_text(encoding="utf-8"), source=str(path))
    seed = seeds_dir() / f"{ref}.yaml"
    if not seed.is_file():
        raise HarnessError(f"unknown harness {str(ref)!r}: not a file and not a seed "
                           f"(seeds: {', '.join(seed_names())})")
    return Harness.from_yaml(seed.read_text(encoding="utf-8"), source=f"seed {ref}")
