"""The cost-aware episode reward of EvoHarness-RL, as plain functions.

    R = w_success * won
      + w_efficiency * won * (1 - steps / max_steps)          efficiency: only a win earns it
      - w_spam * min(meta_actions, spam_cap)                 meta-actions charged, at most spam_cap of them
      - w_invalid * invalid_replies                          every reply that named no action

`episode_reward` scores one episode; `cost_aware_reward` is the same in TRL's reward-function form
`(completions, **kwargs) -> list[float]`, reading the per-rollout columns that harnevo's GRPO rollout
returns (`success`, `steps`, `max_steps`, `meta_actions`, `invalid_replies`). Defaults: success 10,
efficiency 1, spam 0.1 capped at 10 calls, invalid 0.1 (`harnevo.train.config.RewardWeights`).
"""

from __future__ import annotations

from typing import Any, Callable

from harnevo.train.config import RewardWeights


def episode_reward(*, success: bool, steps: int, max_steps: int, meta_actions: int = 0, invalid_replies: int = 0,
                   weights: RewardWeights | None = None) -> float:
    return sum(reward_terms(success=success, steps=steps, max_steps=max_steps, meta_actions=meta_actions,
                            invalid_replies=invalid_replies, weights=weights).values())


def reward_terms(*, success: bool, steps: int, max_steps: int, meta_actions: int = 0, invalid_replies: int = 0,
                 weights: RewardWeights | None = None) -> dict[str, float]:
    """The reward's terms, signed as they enter it (the module docstring's formula; also for logs)."""
    w = weights or RewardWeights()
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    won = 1.0 if success else 0.0
    return {"success": w.success * won,
            "efficiency": w.efficiency * won * max(0.0, 1.0 - min(steps, max_steps) / max_steps),
            "spam": -w.spam * min(max(meta_actions, 0), w.spam_cap),
            "invalid": -w.invalid * max(invalid_replies, 0)}


def cost_aware_reward(weights: RewardWeights | None = None) -> Callable[..., list[float]]:
    """A TRL reward function over rollouts that carry the episode columns."""
    w = weights or RewardWeights()

    def cost_aware(completions: list[Any], **kwargs: Any) -> list[float]:
        n = len(completions)
        cols = {k: kwargs[k] for k in ("success", "steps", "max_steps", "meta_actions", "invalid_replies")}
        return [episode_reward(success=bool(cols["success"][i]), steps=int(cols["steps"][i]),
                               max_steps=int(cols["max_steps"][i]), meta_actions=int(cols["meta_actions"][i]),
                               invalid_replies=int(cols["invalid_replies"][i]), weights=w) for i in range(n)]

    cost_aware.__name__ = "cost_aware"
    return cost_aware


def episode_stat(column: str) -> Callable[..., list[float]]:
    """A zero-weight 'reward' that only reports an episode column, so TRL logs its mean per update
    (rewards/<column>/mean)."""

    def stat(completions: list[Any], **kwargs: Any) -> list[float]:
        return [float(v) for v in kwargs[column][: len(completions)]]

    stat.__name__ = column
    return stat


__all__ = ["cost_aware_reward", "episode_reward", "episode_stat", "reward_terms"]
