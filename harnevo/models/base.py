"""The model contract every `--model` satisfies: an async chat completion returning a `Reply`.

Nothing here imports litellm. Providers: `sim/...` (simulated agents, models/sim.py), `hf/...`
(local transformers checkpoints through a litellm custom provider) and any litellm model string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


def approx_tokens(text: str) -> int:
    """A provider-free token estimate (about 4 characters a token), used where no tokenizer answers."""
    return max(1, (len(text) + 3) // 4) if text else 0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def __iadd__(self, other: "Usage") -> "Usage":
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        return self


@dataclass
class Reply:
    """One completed model call. `usage` is what the provider reported (or an estimate for sim);
    `usage.cost_usd` is the list price of the call, also when it was served from the cache (what was
    actually paid is `cost.spend_of(reply)`, zero for a cache hit)."""

    text: str
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    cached: bool = False  # served from the reply cache: no request was made, nothing was paid
    retries: int = 0  # transient failures retried before this reply came
    finish_reason: str | None = None  # "stop", "length" (truncated at max_tokens), ... when the provider says
    token_ids: list[int] | None = None  # the completion's token ids, when the provider gives them (local hf/)
    logprobs: list[float] | None = None  # one log-probability per completion token, when given

    @property
    def truncated(self) -> bool:
        """The reply stopped at max_tokens: a parse failure then is truncation, not a malformed reply."""
        return self.finish_reason == "length"


@runtime_checkable
class Model(Protocol):
    """An async chat model. `complete` raises `harnevo.errors.ModelCallError` when a call fails for good."""

    name: str  # the --model string (no secrets)
    simulated: bool  # True for sim/... agents; every report says so

    async def complete(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        sample: int = 0,
    ) -> Reply:
        """`sample` distinguishes repeated samples of the same prompt (reply cache key when temperature > 0)."""
        ...

    async def aclose(self) -> None: ...
