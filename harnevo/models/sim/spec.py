"""Simulated model names: `sim/<name>?key=value&...` -> an agent (see agents.py for the parameters)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from harnevo.errors import ModelNotFoundError
from harnevo.models.sim.agents import BoundedAgent, LatencyAgent, RandomAgent, SimModel

_PARAMS: dict[str, dict[str, type]] = {
    "bounded": {"lapse": float, "per_1k_tokens": float, "forget_per_1k": float, "knowledge": float, "seed": int},
    "latency": {"ms": float, "lapse": float, "per_1k_tokens": float, "forget_per_1k": float, "knowledge": float,
                "seed": int},
    "random": {"seed": int},
}


def make_sim(spec: str) -> SimModel:
    """'sim/bounded?lapse=0.05&per_1k_tokens=0.02&seed=0' -> a simulated model. Unknown names or bad
    parameters raise ModelNotFoundError with one line."""
    if not spec.startswith("sim/"):
        raise ModelNotFoundError(f"not a simulated model name: {spec!r} (expected sim/<name>)")
    base, _, query = spec[4:].partition("?")
    if base not in _PARAMS:
        raise ModelNotFoundError(f"unknown simulated model {spec!r}; known: "
                                 + ", ".join(f"sim/{n}" for n in _PARAMS))
    allowed = _PARAMS[base]
    kw: dict[str, float | int] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ModelNotFoundError(f"bad parameters in {spec!r}: expected key=value&key=value") from None
    for k, v in pairs:
        if k not in allowed:
            raise ModelNotFoundError(f"unknown parameter {k!r} for sim/{base} in {spec!r}; "
                                     f"allowed: {', '.join(allowed)}")
        try:
            val = allowed[k](v)
        except ValueError:
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} is not a valid "
                                     f"{allowed[k].__name__}") from None
        if k in ("lapse", "per_1k_tokens", "forget_per_1k", "knowledge", "ms") and not (val >= 0 and val == val and val != float("inf")):
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} must be a finite number >= 0")
        if k in ("lapse", "knowledge") and val > 1:
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} must be between 0 and 1")
        kw[k] = val
    if base == "bounded":
        return BoundedAgent(spec, **kw)  # type: ignore[arg-type]
    if base == "latency":
        return LatencyAgent(spec, **kw)  # type: ignore[arg-type]
    return RandomAgent(spec, seed=int(kw.get("seed", 0)))
