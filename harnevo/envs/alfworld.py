"""The real ALFWorld engine: TextWorld's PDDL engine with ALFWorld's own wrappers.

This is the only module of harnevo that imports `textworld` (and ALFWorld's engine wrappers).
Synchronous building blocks live here: making an env for one game file, turning its state into an
`Observation`, replaying actions, and solving a game with ALFWorld's experts.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

EXPERT_TYPES = ("handcoded", "planner")


@dataclass
class Observation:
    """What the engine says after a reset or a step."""

    text: str
    admissible: list[str] = field(default_factory=list)
    won: bool = False
    done: bool = False
    expert_plan: list[str] = field(default_factory=list)  # the expert's next action(s), when asked for

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "admissible": self.admissible, "won": self.won, "done": self.done,
                "expert_plan": self.expert_plan}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Observation":
        return cls(text=d["text"], admissible=list(d.get("admissible", [])), won=bool(d.get("won")),
                   done=bool(d.get("done")), expert_plan=list(d.get("expert_plan", [])))


def make_env(game_file: str, *, expert: str | None = None, admissible: bool = True):
    """A TextWorld env for one ALFWorld game with the demangler and infos wrappers, plus the expert
    wrapper when `expert` is 'handcoded' or 'planner'. The env is loaded, not reset."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    extras = ["gamefile"]
    wrappers: list[Any] = [AlfredDemangler(shuffle=False), AlfredInfos]
    if expert is not None:
        if expert not in EXPERT_TYPES:
            raise ValueError(f"unknown expert {expert!r}; expected one of {EXPERT_TYPES}")
        wrappers.append(AlfredExpert(expert_type=expert))  # by keyword: the first positional is env
        extras.append("expert_plan")
    infos = textworld.EnvInfos(won=True, admissible_commands=admissible, extras=extras)
    argv = list(sys.argv)
    try:
        return textworld.start(game_file, request_infos=infos, wrappers=wrappers)
    finally:
        sys.argv[:] = argv  # the in-process PDDL planner overwrites sys.argv


def to_observation(state: Any, done: bool = False) -> Observation:
    return Observation(
        text=str(state["feedback"]).strip(),
        admissible=[c for c in (state.get("admissible_commands") or [])],
        won=bool(state.get("won")),
        done=bool(done or state.get("won") or state.get("lost")),
        expert_plan=list(state.get("extra.expert_plan") or []),
    )


def reset(env) -> Observation:
    argv = list(sys.argv)
    try:
        return to_observation(env.reset())
    finally:
        sys.argv[:] = argv


def step(env, action: str) -> Observation:
    state, _score, done = env.step(action)
    return to_observation(state, done)


def replay(game_file: str, actions: list[str]) -> bool:
    """Play `actions` from a fresh reset; True when the game is won by the end."""
    env = make_env(game_file, admissible=False)
    try:
        obs = reset(env)
        for a in actions:
            obs = step(env, a)
            if obs.won:
                return True
        return obs.won
    finally:
        env.close()


class _Timeout(Exception):
    pass


def solve_with_expert(game_file: str, *, expert: str = "handcoded", max_steps: int = 50,
                      timeout_s: float = 60.0) -> list[str] | None:
    """Let ALFWorld's expert play the game; its winning action list, or None when it fails, gets
    stuck or runs past `timeout_s` (wall clock, enforced with SIGALRM: call from a main thread)."""

    def on_alarm(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    env = None
    try:
        env = make_env(game_file, expert=expert, admissible=True)
        obs = reset(env)
        actions: list[str] = []
        for _ in range(max_steps):
            if not obs.expert_plan:
                return None
            action = obs.expert_plan[0]
            obs = step(env, action)
            actions.append(action)
            if obs.won:
                return actions
            if obs.done:
                return None
        return None
    except _Timeout:
        return None
    except Exception:  # the expert raises on games it cannot handle: that is "not solved"
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if env is not None:
            try:
                env.close()
            except Exception:
                pass


def engine_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"alfworld": version("alfworld"), "textworld": version("textworld")}


__all__ = ["Observation", "make_env", "reset", "step", "replay", "solve_with_expert", "engine_versions",
           "EXPERT_TYPES"]
_ = os  # keep os imported for the pool below
