"""The record of one episode: every message, reply, action, observation, meta-action, tokens, cost,
latency and the outcome. One JSON object per line in `trajectories.jsonl`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


def episode_key(harness_id: str, model: str, split: str, game: str, sample: int) -> str:
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
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False
    retries: int = 0
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
    task: str = ""
    success: bool = False
    reason: str = ""  # "won", "step budget exhausted", "model call failed: ...", "engine error: ..."
    steps: int = 0
    env_actions: int = 0
    meta_actions: int = 0
    invalid_replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    retries: int = 0
    model_seconds: float = 0.0
    engine_start_seconds: float = 0.0
    forked_from_cache: bool = False
    wall_seconds: float = 0.0
    turns: list[Turn] = field(default_factory=list)
    schema: int = SCHEMA_VERSION

    def add_turn(self, turn: Turn) -> None:
        self.turns.append(turn)
        self.prompt_tokens += turn.prompt_tokens
        self.completion_tokens += turn.completion_tokens
        self.cost_usd += turn.cost_usd
        self.cache_hits += int(turn.cached)
        self.retries += turn.retries
        self.model_seconds += turn.latency_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        d = dict(d)
        turns = [Turn(**t) for t in d.pop("turns", [])]
        return cls(**d, turns=turns)
