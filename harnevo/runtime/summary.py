"""Aggregates of an evaluation: success with a Wilson 95% interval, per family, steps, tokens, cost."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

from harnevo.runtime.trajectory import Trajectory


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(trajs: Iterable[Trajectory], **header: Any) -> dict[str, Any]:
    """The summary.json body. `header` carries identity fields (harness_id, harness_name, model,
    simulated, split, data_source, ...), written first."""
    trajs = list(trajs)
    n = len(trajs)
    wins = sum(t.success for t in trajs)
    fam: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        fam[t.family].append(t)
    reasons: dict[str, int] = defaultdict(int)
    for t in trajs:
        if not t.success:
            reasons[t.reason.split(":")[0]] += 1
    low, high = wilson(wins, n)
    mean = (lambda xs: sum(xs) / len(xs) if xs else 0.0)
    return {
        **header,
        "games": n,
        "successes": wins,
        "success_rate": wins / n if n else 0.0,
        "ci95": [low, high],
        "per_family": {f: {"games": len(ts), "success_rate": sum(t.success for t in ts) / len(ts)}
                       for f, ts in sorted(fam.items())},
        "mean_steps": mean([t.steps for t in trajs]),
        "meta_actions_per_episode": mean([t.meta_actions for t in trajs]),
        "invalid_replies_per_episode": mean([t.invalid_replies for t in trajs]),
        "failure_reasons": dict(sorted(reasons.items())),
        "prompt_tokens": sum(t.prompt_tokens for t in trajs),
        "completion_tokens": sum(t.completion_tokens for t in trajs),
        "cost_usd": sum(t.cost_usd for t in trajs),
        "cache_hits": sum(t.cache_hits for t in trajs),
        "retries": sum(t.retries for t in trajs),
    }
