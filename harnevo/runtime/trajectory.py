"""The record of one episode: every message, reply, action, observation, meta-action, tokens, cost,
latency and the outcome. One JSON object per line in `trajectories.jsonl`.

`status` keeps the harness's failures apart from the infrastructure's: `ok` means the episode was played
to its end and won or lost on its merits (a broken reply, a template error, the step budget); `infra_error`
means the engine or the model failed under it (engine crash, model unreachable after retries). An
`infra_error` episode is not a result: it is never counted in a success rate or a fitness, and a re-run
into the same folder plays it again.

Schema versions: 1 (no status, no costs at list price, no bank edits) is migrated on load; a newer schema
than this code knows is refused (`SchemaError`), never silently dropped and replayed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from harnevo.errors import HarnevoError

SCHEMA_VERSION = 2
OK, INFRA_ERROR = "ok", "infra_error"
STATUSES = (OK, INFRA_ERROR)
_INFRA_REASONS = ("engine error", "model call failed")


class SchemaError(HarnevoError):
    """A trajectory line this version cannot read (written by a newer harnevo, or damaged)."""


def episode_key(harness_id: str, model: str, split: str, game: str, sample: int) -> str:
    """`harness_id` is the harness's behaviour id: a renamed harness finds its episodes again."""
    return f"{harness_id}|{model}|{split}|{game}|{sample}"


@dataclass
class Turn:
    step: int  # steps spent after this turn
    messages: list[dict[str, str]]
    reply: str
    action: str | None = None  # the command the model wrote (normalised)
    meta: str | None = None  # "track apple" when the turn was a meta-action
    executed: str | None = None  # what reached the engine after the guard (None: nothing did)
    guard_note: str | None = None
    invalid: str | None = None  # why the reply gave no usable action
    observation: str = ""
    won: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # list price of the call, cached or not
    spent_usd: float = 0.0  # what it cost now: 0 for a cache hit
    latency_s: float = 0.0
    cached: bool = False
    retries: int = 0
    finish_reason: str | None = None
    supervisor: str | None = None  # "approved" or "replaced '<proposed>'" when a supervisor saw the action
    expert_plan: list[str] | None = None


@dataclass
class Trajectory:
    key: str
    harness_id: str
    harness_name: str
    model: str
    simulated: bool
    split: str
    game: str
    game_path: str
    family: str
    sample: int
    behaviour_id: str = ""
    task: str = ""
    status: str = OK  # ok | infra_error (see the module docstring)
    success: bool = False
    reason: str = ""  # "won", "step budget exhausted", "render error: ...", "model call failed: ...", "engine error: ..."
    steps: int = 0
    env_actions: int = 0
    meta_actions: int = 0
    invalid_replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # list price of every call
    spent_usd: float = 0.0  # what was paid now (cache hits free)
    cache_hits: int = 0
    retries: int = 0
    supervisor_interventions: int = 0
    model_seconds: float = 0.0
    engine_start_seconds: float = 0.0
    forked_from_cache: bool = False
    wall_seconds: float = 0.0
    bank_edits: list[dict] = field(default_factory=list)  # Experience edits, applied by the evaluator in order
    bank_seen: str = ""  # fingerprint of the bank snapshot this episode read ("" without Experience)
    turns: list[Turn] = field(default_factory=list)
    schema: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.status == OK

    def fail_infra(self, reason: str) -> None:
        self.status, self.success, self.reason = INFRA_ERROR, False, reason

    def add_turn(self, turn: Turn) -> None:
        self.turns.append(turn)
        self.prompt_tokens += turn.prompt_tokens
        self.completion_tokens += turn.completion_tokens
        self.cost_usd += turn.cost_usd
        self.spent_usd += turn.spent_usd
        self.cache_hits += int(turn.cached)
        self.retries += turn.retries
        self.model_seconds += turn.latency_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        """Read one line's object, migrating older schemas; SchemaError for what cannot be read."""
        if not isinstance(d, dict):
            raise SchemaError(f"a trajectory line must be a JSON object, got {type(d).__name__}")
        d = dict(d)
        version = d.get("schema", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
            raise SchemaError(f"trajectory schema {version!r} is not one this harnevo reads "
                              f"(it reads 1..{SCHEMA_VERSION}); upgrade harnevo or use another folder")
        if version == 1:
            d = _migrate_v1(d)
        try:
            turns = [Turn(**t) for t in d.pop("turns", [])]
            traj = cls(**d, turns=turns)
        except TypeError as e:
            raise SchemaError(f"trajectory {d.get('key', '?')!r}: {e}") from None
        if traj.status not in STATUSES:
            raise SchemaError(f"trajectory {traj.key!r}: unknown status {traj.status!r}")
        return traj


def _migrate_v1(d: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2: a status from the reason; list price = the recorded cost (v1 recorded 0 for cache
    hits, so their list price is unknown and stays 0), spent = recorded cost; no bank edits were kept
    (v1 wrote lessons to experience.json directly)."""
    d = {**d, "schema": SCHEMA_VERSION}
    reason = str(d.get("reason", ""))
    d["status"] = INFRA_ERROR if reason.startswith(_INFRA_REASONS) else OK
    d.setdefault("spent_usd", d.get("cost_usd", 0.0))
    d.setdefault("behaviour_id", "")
    d["turns"] = [{**t, "spent_usd": t.get("cost_usd", 0.0)} for t in d.get("turns", [])]
    return d
