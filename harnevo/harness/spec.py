"""The `Harness` value: a prompt program with a memory policy, an action guard, a reply policy, a mode,
a step budget and model settings. Loaded from one YAML file with a strict schema; frozen.

The prompt program takes one of two forms, exactly one per harness:
  prompt:     blocks from the library (harnevo/harness/blocks.py), listed in order for the system and
              the turn message, with the text genes they show:
                prompt: {system: [role, reply_format, ...], turn: [task, room, ...],
                         text: {instruction: ..., reply_format: ..., examples: ..., headers: {belief: Belief, ...}}}
  templates:  whole hand-written Jinja templates, {system: ..., turn: ..., <partials>: ...}
Either way `template_sources()` gives the final Jinja sources that `Renderer` compiles.

Identity: `id` hashes every field (and, for block form, the assembled sources, so an edited block
library gives new ids); `behaviour_id` hashes the normalized form without name and description
(harnevo/harness/genome.py), so two harnesses that behave alike share it.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import operator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from harnevo.errors import HarnessError
from harnevo.harness import blocks
from harnevo.harness.render import check_templates

Mode = Literal["env_only", "always_on", "inline"]
Guard = Literal["none", "nearest_admissible", "nearest_same_objects", "reject"]
REQUIRED_TEMPLATES = ("system", "turn")
META_ACTIONS = ("track", "commit", "recall", "note")
MAX_HARNESS_FILE_BYTES = 1_000_000


def _integral(v: Any) -> Any:
    """50.0 -> 50 (numeric optimisers produce integral floats); numpy integers -> int. A float with a
    fraction stays a float, which the strict int field then refuses."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if not isinstance(v, (bool, int, float, str)) and hasattr(v, "__index__"):
        return operator.index(v)
    return v


def _real(v: Any) -> Any:
    """numpy floats and integers -> float; bools and strings are left to be refused."""
    if not isinstance(v, (bool, int, float, str)) and isinstance(v, numbers.Real):
        return float(v)
    return v


Int = Annotated[int, BeforeValidator(_integral)]
Float = Annotated[float, BeforeValidator(_real)]


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
    experience_bank_size: Int = Field(20, ge=0, le=500, description="most lessons kept in the bank")
    experience_shown: Int = Field(5, ge=0, le=50, description="most lessons shown or recalled at once")
    history_window: Int = Field(8, ge=0, le=200, description="past steps shown in the turn message")


class StepBudget(_Frozen):
    """Steps per episode (the spend budget in dollars/tokens is `harnevo.models.cost.Budget`)."""

    max_steps: Int = Field(50, ge=1, le=500, description="steps per episode")
    meta_actions_spend_budget: bool = Field(True, description="a meta-action costs a step like an action")


class ModelSettings(_Frozen):
    temperature: Float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature of the model")
    max_tokens: Int = Field(256, ge=8, le=32768, description="most tokens in one reply")


class ReplyPolicy(_Frozen):
    """How a reply becomes an action (harnevo/harness/parse.py)."""

    bare_line_fallback: bool = Field(
        False, description="when a reply has no 'Action:' line and no '> command' line, read its last line "
                           "(if at most 80 characters) as the command; off: such a reply is invalid, so "
                           "'Sure! Here is my answer.' is never sent to the game")


def _header(default: str, section: str) -> Any:
    return Field(default, min_length=1, max_length=80, description=f"header of the {section} section")


class Headers(_Frozen):
    """Section headers of the turn blocks ("## <header>"). The defaults are the seeds' headers, which the
    simulated agents read."""

    task: str = _header("Task", "task")
    room: str = _header("Room", "room")
    history: str = _header("History", "history")
    belief: str = _header("Belief", "Belief panel")
    progress: str = _header("Progress", "Progress panel")
    experience: str = _header("Experience", "Experience panel")
    observation: str = _header("Observation", "observation")
    guard_note: str = _header("Note", "guard note")
    admissible: str = _header("Admissible actions", "admissible actions")

    @field_validator("*")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v or "\r" in v:
            raise ValueError("a header is one line")
        return v


class PromptText(_Frozen):
    """The text genes of a block-form prompt: literal text (never Jinja) that the blocks show."""

    instruction: str = Field(blocks.default_text("instruction"), max_length=4000,
                             description="the opening instruction (block `role`)")
    reply_format: str = Field(blocks.default_text("reply_format"), max_length=4000,
                              description="how to reply (block `reply_format`)")
    examples: str = Field(blocks.default_text("examples"), max_length=8000,
                          description="worked examples (block `examples`; empty shows nothing)")
    headers: Headers = Headers()


class Prompt(_Frozen):
    """A prompt program made of library blocks, in order."""

    system: list[str] = Field(description="blocks of the system message, in order")
    turn: list[str] = Field(description="blocks of the turn message, in order")
    text: PromptText = PromptText()

    @field_validator("system", "turn")
    @classmethod
    def _known_blocks(cls, v: list[str], info: Any) -> list[str]:
        known = blocks.block_names(info.field_name)
        for name in v:
            if name not in known:
                raise ValueError(f"unknown block {name!r} (blocks: {', '.join(known)})")
        dup = sorted({n for n in v if v.count(n) > 1})
        if dup:
            raise ValueError(f"block(s) listed twice: {', '.join(dup)}")
        return v


class Harness(_Frozen):
    """A frozen harness. Build with `Harness.from_yaml` / `load_harness`; never mutate (use `evolve`)."""

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    mode: Mode = "env_only"
    templates: dict[str, str] | None = Field(None, description="hand-written Jinja templates (or `prompt`)")
    prompt: Prompt | None = Field(None, description="a prompt made of library blocks (or `templates`)")
    memory: MemoryPolicy = MemoryPolicy()
    guard: Guard = "none"
    reply: ReplyPolicy = ReplyPolicy()
    budget: StepBudget = StepBudget()
    model: ModelSettings = ModelSettings()

    @field_validator("templates")
    @classmethod
    def _templates_present(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        missing = [t for t in REQUIRED_TEMPLATES if t not in v]
        if missing:
            raise ValueError(f"missing template(s): {', '.join(missing)}")
        for k in v:
            if not k.replace("_", "").isalnum():
                raise ValueError(f"template name {k!r} must be letters, digits and underscores")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Harness":
        if (self.templates is None) == (self.prompt is None):
            raise ValueError("a harness needs exactly one of `prompt` (blocks) and `templates` (hand-written)")
        if self.mode != "env_only" and not (self.memory.belief or self.memory.progress or self.memory.experience):
            raise ValueError(f"mode {self.mode!r} needs at least one of memory.belief/progress/experience")
        return self

    def __hash__(self) -> int:
        return hash(self.id)

    # --- the prompt program ---------------------------------------------------------------------
    def template_sources(self) -> dict[str, str]:
        """The Jinja sources to render, keys at least "system" and "turn": `Renderer(h.template_sources())`."""
        if self.templates is not None:
            return dict(self.templates)
        return blocks.assemble(self.prompt)

    # --- identity -------------------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """Every field, defaults included, keys sorted."""
        return json.loads(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    @property
    def id(self) -> str:
        """The hash of every field (and of the assembled sources of a block-form prompt)."""
        return identity_hash(self.canonical(), self)

    @property
    def behaviour_id(self) -> str:
        """Shared by harnesses that behave alike: the hash of the normalized form without name and
        description (see `harnevo.harness.genome.normalize`)."""
        from harnevo.harness.genome import behaviour_id  # genome imports spec

        return behaviour_id(self)

    # --- serialising and deriving ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The YAML-ready mapping: every field, without the prompt form this harness does not use."""
        data = self.model_dump(mode="json")
        data.pop("templates" if self.templates is None else "prompt")
        return data

    def to_yaml(self) -> str:
        return yaml.dump(self.to_dict(), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)

    def evolve(self, **changes: Any) -> "Harness":
        """A new harness with `changes` applied (nested sections as dicts, merged; `templates` and lists
        replaced whole), validated like a file."""
        data = self.model_dump(mode="json")
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "templates":
                data[key] = _merged(data[key], value)
            else:
                data[key] = value
        return Harness.from_dict(data, source=f"{self.name} (evolved)")

    # --- loading ----------------------------------------------------------------------------------
    @classmethod
    def validate_dict(cls, data: Any, *, source: str = "<harness>") -> "Harness":
        """Schema validation only (no template check): for values derived from a valid harness."""
        if not isinstance(data, dict):
            raise HarnessError(f"{source}: a harness file must be a YAML mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise HarnessError(f"{source}: {_first_error(e)}") from None

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<harness>") -> "Harness":
        """The one loader: strict schema, then every template compiled and rendered within its budget."""
        harness = cls.validate_dict(data, source=source)
        check_templates(harness, source=source)
        return harness

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<harness>") -> "Harness":
        try:
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise HarnessError(f"{source}: not valid YAML{where}: {_one_line(e.problem or e)}") from None
        except yaml.YAMLError as e:
            raise HarnessError(f"{source}: not valid YAML: {_one_line(getattr(e, 'reason', None) or e)}") from None
        except RecursionError:
            raise HarnessError(f"{source}: not valid YAML: nested too deeply") from None
        if data is None:
            raise HarnessError(f"{source}: the harness is empty")
        return cls.from_dict(data, source=source)


def identity_hash(data: dict[str, Any], harness: Harness) -> str:
    """sha256 (16 hex digits) of a canonical mapping, with the assembled sources of a block-form prompt."""
    blob_data = dict(data)
    if harness.prompt is not None:
        blob_data["template_sources"] = harness.template_sources()
    blob = json.dumps(blob_data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in changes.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks and block lists on one line, so `harness show` stays readable."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _list_representer(dumper: yaml.SafeDumper, value: list) -> yaml.Node:
    flow = all(isinstance(x, str) and "\n" not in x for x in value)  # block lists: [role, reply_format, ...]
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(str, _str_representer)
_Dumper.add_representer(list, _list_representer)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    msg = _one_line(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"unknown field {field!r}"
    if err["type"] == "missing":
        return f"missing field {field!r}"
    if not field:
        return msg
    return f"field {field!r}: {msg}"


def seeds_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "harness_templates"


def seed_names() -> list[str]:
    return sorted(p.stem for p in seeds_dir().glob("*.yaml"))


def read_harness_file(path: Path) -> str:
    """The text of a harness file, or a one-line HarnessError saying why it cannot be read."""
    try:
        if path.is_dir():
            raise HarnessError(f"{path}: is a directory, not a harness file")
        if not path.exists():
            raise HarnessError(f"harness file not found: {path}")
        if not path.is_file():
            raise HarnessError(f"{path}: not a regular file")
        size = path.stat().st_size
        if size > MAX_HARNESS_FILE_BYTES:
            raise HarnessError(f"{path}: {size} bytes; a harness file is at most {MAX_HARNESS_FILE_BYTES} bytes")
        raw = path.read_bytes()[: MAX_HARNESS_FILE_BYTES + 1]
    except PermissionError:
        raise HarnessError(f"{path}: cannot read the file: permission denied") from None
    except OSError as e:
        raise HarnessError(f"{path}: cannot read the file: {e.strerror or e}") from None
    if b"\x00" in raw:
        raise HarnessError(f"{path}: a binary file, not a YAML harness")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HarnessError(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None
    if not text.strip():
        raise HarnessError(f"{path}: the file is empty")
    return text


def load_harness(ref: str | Path) -> Harness:
    """A harness from a YAML path or the name of a seed shipped with harnevo."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return Harness.from_yaml(read_harness_file(path), source=str(path))
    seed = seeds_dir() / f"{ref}.yaml"
    if not seed.is_file():
        raise HarnessError(f"unknown harness {str(ref)!r}: not a file and not a seed "
                           f"(seeds: {', '.join(seed_names())})")
    return Harness.from_yaml(seed.read_text(encoding="utf-8"), source=f"seed {ref}")
