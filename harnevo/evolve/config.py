"""The one validated config of an evolution run: a YAML file (`--config run.yaml`) and CLI overrides,
unknown keys are errors, and exactly one budget knob (generations, episodes, tokens or dollars) decides
when the run stops: generations are counted between generations; episodes, tokens and dollars are checked
before every episode (tokens and dollars before every model call), and the generation they cut short is not
saved, so the run ends with the last complete generation and `resume` with a larger budget continues it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harnevo.errors import HarnevoError

OBJECTIVES = ("success", "tokens", "cost", "meta")
BUDGET_KNOBS = ("generations", "episodes", "budget_tokens", "budget_usd")
MUTATOR_KEYS = ("mutator_model", "mutator_api_base", "mutator_max_tokens", "mutator_template", "mutator_prob",
                "mutator_failures")


class EvolveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field("sim/bounded", description="the model every candidate is evaluated with")
    seeds: list[str] = Field(["react", "bpe_always_on", "bpe_inline"], description="seed harnesses (names or files)")
    split: Optional[str] = Field(None, description="games to evolve on (default: valid_train when official data "
                                                   "is found, else the generated set)")
    games: int = Field(48, ge=1, le=5000, description="a seeded sample of this many games")
    families: Optional[str] = Field(None, description="task families to keep, e.g. heat,cool")
    data: Optional[str] = Field(None, description="folder holding json_2.1.1 (default $ALFWORLD_DATA)")
    population: int = Field(16, ge=2, le=512, description="candidates kept per generation")
    generations: Optional[int] = Field(None, ge=1, le=1000, description="budget: generations after the seeds' (default 10)")
    episodes: Optional[int] = Field(None, ge=1, description="budget: episodes played in all")
    budget_tokens: Optional[int] = Field(None, ge=1, description="budget: tokens spent in all")
    budget_usd: Optional[float] = Field(None, gt=0, description="budget: dollars spent in all")
    seed: int = Field(0, description="one seed for the whole run (games sample, operators, selection)")
    objectives: list[str] = Field(["success", "tokens", "meta"], description="success (up), tokens | cost, meta (down)")
    search: Literal["evolve", "random"] = Field("evolve", description="evolve: DEAP; random: valid random genomes")
    racing: bool = Field(True, description="race new candidates on a stratified minibatch first")
    minibatch: int = Field(12, ge=1, description="games a new candidate plays before it may be stopped")
    race_step: int = Field(12, ge=1, description="games added per racing round after the minibatch")
    race_margin: float = Field(0.1, ge=0.0, le=1.0, description="racing stops a candidate that cannot come within "
                               "this much of the front's best success, however cheap (1: cheap ones never stopped)")
    concurrency: int = Field(8, ge=1, le=512, description="episodes in flight at once, across candidates")
    workers: Optional[int] = Field(None, ge=1, description="engine worker processes (default: one per core)")
    crossover_prob: float = Field(0.5, ge=0.0, le=1.0, description="chance that offspring come from crossover")
    mutation_prob: float = Field(1.0, ge=0.0, le=1.0, description="chance that a crossover child is mutated too")
    mutation_steps: int = Field(1, ge=1, le=8, description="mutations chained into each mutant (1: one operator, "
                                "mostly one gene, per mutation)")
    init: Literal["mutants", "random"] = Field("mutants", description="how generation 0 is filled beside the seeds "
                                               "(evolve search): mutants of the seeds in turn, or random harnesses "
                                               "drawn as --search random draws them")
    tournament_size: int = Field(3, ge=2, le=64, description="tournament size (single-objective selection)")
    elite: int = Field(2, ge=0, description="best candidates kept as they are (single-objective selection)")
    experience_lag: int = Field(16, ge=1, description="episode i reads lessons of episodes 0..i-lag")
    max_steps: Optional[int] = Field(None, ge=1, le=500, description="override every candidate's step budget")
    api_base: Optional[str] = None
    price: Optional[tuple[float, float]] = None
    timeout_s: float = Field(60.0, gt=0)
    cache: Optional[str] = Field("default", description="reply cache file; 'default'; null: none")
    cache_tag: Optional[str] = None
    mutator_model: Optional[str] = Field(None, description="reflective mutation: the model that rewrites text genes "
                                         "from failure evidence (any --model string); null: structural operators only")
    mutator_api_base: Optional[str] = Field(None, description="base URL of the mutator's OpenAI-compatible server")
    mutator_max_tokens: int = Field(6000, ge=200, le=200_000, description="token cap of one reflection request "
                                    "(evidence is trimmed to fit before it is sent)")
    mutator_template: Optional[str] = Field(None, description="Jinja file of the reflection request "
                                            "(default harness_templates/reflect.j2)")
    mutator_prob: float = Field(0.5, gt=0.0, le=1.0, description="about this share of mutations try the reflective "
                                "operator first (a rejected proposal falls back to a structural one)")
    mutator_failures: int = Field(3, ge=1, le=20, description="lost episodes shown to the mutator per request")

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[str]) -> list[str]:
        unknown = [o for o in v if o not in OBJECTIVES]
        if unknown:
            raise ValueError(f"unknown objective(s) {', '.join(unknown)}; choose from {', '.join(OBJECTIVES)}")
        if not v or v[0] != "success" or len(set(v)) != len(v):
            raise ValueError("objectives start with 'success' and name each objective once, e.g. success,tokens,meta")
        if "tokens" in v and "cost" in v:
            raise ValueError("choose tokens or cost as the cost objective, not both")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one seed harness")
        return v

    @model_validator(mode="after")
    def _one_budget(self) -> "EvolveConfig":
        set_knobs = [k for k in BUDGET_KNOBS if getattr(self, k) is not None]
        if len(set_knobs) > 1:
            raise ValueError(f"exactly one budget knob decides when the run stops; got {', '.join(set_knobs)}")
        if len(self.objectives) > 1 and self.population < 4:
            raise ValueError(f"NSGA-II needs a population of at least 4, got {self.population}")
        if self.mutator_model is None:
            changed = [k for k in MUTATOR_KEYS[1:] if k in self.model_fields_set and getattr(self, k) is not None]
            if changed:
                raise ValueError(f"{changed[0]} needs mutator_model (--mutator-model)")
        if self.elite >= self.population:
            raise ValueError(f"elite ({self.elite}) must be smaller than the population ({self.population})")
        return self

    @property
    def budget_knob(self) -> tuple[str, float]:
        for k in BUDGET_KNOBS:
            if getattr(self, k) is not None:
                return k, getattr(self, k)
        return "generations", 10

    def to_json(self) -> dict[str, Any]:
        """The config as stored (and hashed) by the run; without a mutator its settings are left out, and
        mutation_steps at its default 1 and init at its default, so runs made before they existed keep their config
        hash and resume."""
        data = self.model_dump(mode="json")
        if self.mutator_model is None:
            for k in MUTATOR_KEYS:
                data.pop(k)
        if self.mutation_steps == 1:
            data.pop("mutation_steps")
        if self.init == "mutants":
            data.pop("init")
        return data


def load_config(path: Path | None, overrides: dict[str, Any]) -> EvolveConfig:
    """The config from a YAML file (optional) with CLI overrides (None values are not overrides)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = yaml.safe_load(text) or {}
        except (OSError, UnicodeDecodeError) as e:
            raise HarnevoError(f"--config {path}: cannot read it ({type(e).__name__})") from None
        except yaml.YAMLError as e:
            raise HarnevoError(f"--config {path}: not valid YAML ({getattr(e, 'problem', e)})") from None
        if not isinstance(data, dict):
            raise HarnevoError(f"--config {path}: expected a mapping of settings")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return parse_config(data, source=str(path) if path else "evolve")


def parse_config(data: dict[str, Any], *, source: str = "evolve") -> EvolveConfig:
    for key in ("seeds", "objectives"):
        if isinstance(data.get(key), str):
            data[key] = [s.strip() for s in data[key].split(",") if s.strip()]
    try:
        return EvolveConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "extra_forbidden":
            raise HarnevoError(f"{source}: unknown setting {field!r}") from None
        msg = err["msg"].removeprefix("Value error, ")
        raise HarnevoError(f"{source}: {field if field != 'config' else 'config'}: {msg}") from None
