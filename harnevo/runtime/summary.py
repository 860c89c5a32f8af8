"""Aggregates of an evaluation: success with a 95% interval over games, per family, steps, tokens, cost.

Only episodes with status `ok` count in a success rate; `infra_error` episodes are counted apart.
The interval is over games, not episodes: repeated samples of one game are clustered (each game
contributes the mean of its samples, and the Wilson interval uses the number of games as n), so k
identical replays of a game at temperature 0 are one observation, never k."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable

from harnevo.runtime.trajectory import Trajectory


def wilson(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's 95% interval for `successes` of `n` independent trials."""
    return wilson_rate(successes / n if n else 0.0, n, z)


def clustered_success(trajs: Iterable[Trajectory]) -> tuple[float, tuple[float, float], int]:
    """(success rate, 95% interval, games) with samples clustered by game: the rate is the mean over
    games of each game's mean success; the interval is Wilson's with n = games."""
    by_game: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for t in trajs:
        by_game[(t.split, t.game)].append(t.success)
    g = len(by_game)
    if not g:
        return 0.0, (0.0, 0.0), 0
    rate = sum(sum(v) / len(v) for v in by_game.values()) / g
    return rate, wilson_rate(rate, g), g


def wilson_rate(p: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's interval for a proportion `p` observed over `n` independent units."""
    if n == 0:
        return (0.0, 0.0)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(trajs: Iterable[Trajectory], **header: Any) -> dict[str, Any]:
    """The summary.json body. `header` carries identity fields (harness_id, behaviour_id, harness_name,
    model, simulated, split, data_source, ...), written first. Success counts `ok` episodes only."""
    everything = list(trajs)
    trajs = [t for t in everything if t.ok]
    infra = [t for t in everything if not t.ok]
    n = len(trajs)
    wins = sum(t.success for t in trajs)
    fam: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        fam[t.family].append(t)
    reasons: dict[str, int] = defaultdict(int)
    for t in trajs:
        if not t.success:
            reasons[t.reason.split(":")[0]] += 1
    infra_reasons: dict[str, int] = defaultdict(int)
    for t in infra:
        infra_reasons[t.reason.split(":")[0]] += 1
    rate, (low, high), n_games = clustered_success(trajs)
    mean = (lambda xs: sum(xs) / len(xs) if xs else 0.0)
    return {
        **header,
        "episodes": n,
        "games": n_games,
        "successes": wins,
        "success_rate": rate,
        "ci95": [low, high],
        "ci_method": "Wilson 95% over games (samples of a game clustered)",
        "infra_errors": len(infra),
        "infra_error_reasons": dict(sorted(infra_reasons.items())),
        "per_family": {f: {"games": len({t.game for t in ts}), "episodes": len(ts),
                           "success_rate": clustered_success(ts)[0]}
                       for f, ts in sorted(fam.items())},
        "mean_steps": mean([t.steps for t in trajs]),
        "meta_actions_per_episode": mean([t.meta_actions for t in trajs]),
        "invalid_replies_per_episode": mean([t.invalid_replies for t in trajs]),
        "failure_reasons": dict(sorted(reasons.items())),
        "prompt_tokens": sum(t.prompt_tokens for t in trajs),
        "completion_tokens": sum(t.completion_tokens for t in trajs),
        "tokens_per_episode": mean([t.prompt_tokens + t.completion_tokens for t in trajs]),
        "cost_usd": sum(t.cost_usd for t in trajs),
        "cost_usd_per_episode": mean([t.cost_usd for t in trajs]),
        "spent_usd": sum(t.spent_usd for t in everything),
        "cache_hits": sum(t.cache_hits for t in trajs),
        "retries": sum(t.retries for t in everything),
        "supervisor_interventions_per_episode": mean([t.supervisor_interventions for t in trajs]),
    }
