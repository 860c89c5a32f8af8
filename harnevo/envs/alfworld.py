"""The real ALFWorld engine: TextWorld's PDDL engine with ALFWorld's own wrappers.

This is the only module of harnevo that imports `textworld` and `alfworld` (the engine wrappers, and
for the generator and the scenes the wheel's data and text helpers, see `alfworld_package`). It owns
the synchronous building blocks: making an env for one game file, turning its state into an
`Observation`, replaying actions, solving a game with ALFWorld's experts, `install_parse_memo` (an
exact memo of TextWorld's grammar parsers that makes steps cheaper) and `preload` (imports the engine
ahead of time). At the end come the game checks of the generator (`check_game`, `enable_parse_cache`).

The concurrent engine built on these (`EnginePool`, `EngineEpisode`, `EngineError`) lives in
`harnevo.envs.pool`; its worker processes (`harnevo.envs.worker`) are the other place that runs the engine.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

EXPERT_TYPES = ("handcoded", "planner")
# Part of every step-cache key (with the alfworld and textworld versions): bump it whenever harnevo's
# side changes what an Observation holds for a given game and action history (`to_observation`, the
# wrappers `make_env` attaches, the seeding of the expert in harnevo.envs.worker).
ENGINE_CODE_VERSION = 1


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


def alfworld_package() -> ModuleType:
    """`import alfworld`, minus its side effect: alfworld/__init__ sets $ALFWORLD_DATA (to
    ~/.cache/alfworld) for the whole process, which would make harnevo look for official games there.
    Later imports of alfworld modules are side-effect free, the package being loaded."""
    before = os.environ.get("ALFWORLD_DATA")
    import alfworld

    if before is None:
        os.environ.pop("ALFWORLD_DATA", None)
    else:
        os.environ["ALFWORLD_DATA"] = before
    return alfworld


def alfworld_dir() -> Path:
    """The installed alfworld package's folder (its data/, gen/layouts/ ...)."""
    return Path(alfworld_package().__file__).resolve().parent


def alfworld_constants() -> ModuleType:
    """`alfworld.gen.constants`: the object, receptacle and action tables (a pure data module)."""
    alfworld_package()
    from alfworld.gen import constants

    return constants


def alfworld_goals() -> ModuleType:
    """`alfworld.gen.goal_library`: the PDDL goal of each task type."""
    alfworld_package()
    from alfworld.gen import goal_library

    return goal_library


def alfworld_text() -> ModuleType:
    """`alfworld.agents.utils.misc`: `Demangler`, `add_task_to_grammar`, `get_templated_task_desc`
    (importing it imports textworld)."""
    alfworld_package()
    from alfworld.agents.utils import misc

    return misc


def make_env(game_file: str, *, expert: str | None = None, admissible: bool = True):
    """A TextWorld env for one ALFWorld game with the demangler and infos wrappers, plus the expert
    wrapper when `expert` is 'handcoded' or 'planner'. The env is loaded, not reset."""
    import textworld

    alfworld_package()
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


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise _Timeout in the main thread after `seconds` of wall clock (SIGALRM; call from a main thread)."""

    def on_alarm(signum, frame):
        raise _Timeout(f"timed out after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def solve_with_expert(game_file: str, *, expert: str = "handcoded", max_steps: int = 50,
                      timeout_s: float = 60.0) -> list[str] | None:
    """Let ALFWorld's expert play the game; its winning action list, or None when it fails, gets
    stuck or runs past `timeout_s` (wall clock, enforced with SIGALRM: call from a main thread)."""
    env = None
    try:
        with deadline(timeout_s):
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
        if env is not None:
            with suppress(Exception):
                env.close()


def engine_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {"alfworld": version("alfworld"), "textworld": version("textworld")}


# ------------------------------------------------------------------ parse memo (used by harnevo.envs.worker)

_PARSE_MEMO_MAX = 20_000
_parse_memo_installed = False
_parse_memo_learned: list[list[str | None]] = []  # [module, text, rule name] parsed since last drained


def install_parse_memo() -> None:
    """Make TextWorld's steps ~2-3x cheaper without changing what they return.

    Most of a step is spent re-parsing the same short grammar strings with tatsu (the admissible
    commands' templates, feedback rules, rule conditions). Both parsers (`textworld.logic` and the
    PDDL text grammar) are pure functions of (text, rule name), so their results are memoised and
    every caller gets its own deep copy (callers mutate them). Checked: identical observations, with
    and without the memo, over walkthroughs of games from all three splits, handcoded expert on.
    Used in the engine's worker processes; idempotent."""
    global _parse_memo_installed
    if _parse_memo_installed:
        return
    import copy

    def memoised(module_name: str, parse):
        memo: dict[tuple[str, str | None], Any] = {}

        def parse_and_convert(text, rule_name=None, **kwargs):
            if kwargs.get("trace") or not isinstance(text, str):
                return parse(text, rule_name=rule_name, **kwargs)
            key = (text, rule_name)
            if key not in memo:
                if len(memo) >= _PARSE_MEMO_MAX:
                    memo.clear()
                memo[key] = parse(text, rule_name=rule_name, **kwargs)
                if len(_parse_memo_learned) < _PARSE_MEMO_MAX:
                    _parse_memo_learned.append([module_name, text, rule_name])
            return copy.deepcopy(memo[key])

        return parse_and_convert

    for name, module in _memo_modules().items():
        module._parse_and_convert = memoised(name, module._parse_and_convert)
    _parse_memo_installed = True


def _memo_modules() -> dict[str, Any]:
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    return {"textgen": textgen, "logic": logic}


def _drain_learned() -> list[list[str | None]]:
    """What the memo parsed since the last call (a forked child sends it, so workers can warm up)."""
    out = list(_parse_memo_learned)
    _parse_memo_learned.clear()
    return out


def _warm_parse_memo(keys: list[list[str | None]]) -> None:
    """Parse what an episode child learned, so that the next children start with a warm memo."""
    modules = _memo_modules()
    for module_name, text, rule_name in keys:
        module = modules.get(str(module_name))
        if module is not None and isinstance(text, str):
            with suppress(Exception):  # the child parsed it fine; a failure here only means no warm-up
                module._parse_and_convert(text, rule_name=rule_name)
    _parse_memo_learned.clear()


def preload() -> None:
    """Import TextWorld and ALFWorld's engine wrappers now, so that the first `make_env` + `reset` are
    not slowed by them (the engine's worker processes call it before they report ready)."""
    import textworld  # noqa: F401

    alfworld_package()
    from alfworld.agents.environment import alfred_tw_env  # noqa: F401


__all__ = ["Observation", "make_env", "reset", "step", "replay", "solve_with_expert", "engine_versions",
           "EXPERT_TYPES", "ENGINE_CODE_VERSION", "install_parse_memo", "preload", "alfworld_package", "alfworld_dir",
           "alfworld_constants", "alfworld_goals", "alfworld_text"]


# ---- game checking for the generator (harnevo.envs.generate) --------------------------------------


def _in_fork(fn, timeout_s: float, cpu_s: float | None = None) -> dict[str, Any]:
    """Run `fn()` in a forked child (it inherits this process's reset env as is) and return the
    JSON-able dict it returns. The child gets `cpu_s` seconds of CPU (RLIMIT_CPU: the same verdict on
    a busy machine as on an idle one) and is killed after `timeout_s` of wall time; either gives
    {"error": "timeout"}."""
    import json as _json
    import resource
    import select
    import time as _time

    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            os.close(rfd)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            if cpu_s is not None:
                limit = max(1, int(round(cpu_s)))
                resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 2))
            try:
                payload = fn()
            except BaseException as e:
                payload = {"error": f"{type(e).__name__}: {e}"[:500]}
            data = _json.dumps(payload).encode()
            while data:
                data = data[os.write(wfd, data):]
        finally:
            os._exit(0)
    os.close(wfd)
    chunks: list[bytes] = []
    deadline = _time.monotonic() + timeout_s
    timed_out = False
    status = 0
    try:
        while True:
            left = deadline - _time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not select.select([rfd], [], [], left)[0]:
                continue
            chunk = os.read(rfd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(rfd)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            status = os.waitpid(pid, 0)[1]
        except OSError:
            pass
    if timed_out or (os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL)):
        return {"error": "timeout"}
    try:
        return _json.loads(b"".join(chunks).decode() or '{"error": "child died"}')
    except ValueError:
        return {"error": "child died"}


_PARSE_CACHE_ON = False


def enable_parse_cache() -> None:
    """For processes that load many games (the engine's and the generator's workers): the parse memo
    (`install_parse_memo`), plus a cache of the PDDL-to-SAS translation of the game being loaded (done
    four times per load + reset). Results are identical, only faster (a reset about 1.7x)."""
    global _PARSE_CACHE_ON
    if _PARSE_CACHE_ON:
        return
    install_parse_memo()

    # Loading a game translates its PDDL to SAS twice, and reset() translates the same text twice
    # again: keep the last few translations (the result is only read afterwards).
    import fast_downward

    orig_pddl2sas = fast_downward.pddl2sas
    recent: dict = {}

    def pddl2sas(domain, problem, verbose=False, optimize=False):
        key = (hash(domain), hash(problem), len(problem), bool(verbose), bool(optimize))
        hit = recent.get(key)
        if hit is None or hit[0] != problem:
            argv = list(sys.argv)
            try:
                hit = (problem, orig_pddl2sas(domain, problem, verbose=verbose, optimize=optimize))
            finally:
                sys.argv[:] = argv
            if len(recent) >= 4:
                recent.clear()
            recent[key] = hit
        return hit[1]

    fast_downward.pddl2sas = pddl2sas
    _PARSE_CACHE_ON = True


def check_game(game_file: str, plans: list[list[str]] | tuple = (), *, max_steps: int = 50,
               expert_cpu_s: float = 60.0, planner: bool = True, planner_cpu_s: float = 10.0,
               wall_timeout_s: float = 600.0, seed: int | None = None) -> dict[str, Any]:
    """Check a game as the generator needs: load and reset it once (ALFWorld's handcoded expert
    attached), then, each in a forked child of that start state (no second reset), replay every
    candidate action list in `plans`; let the handcoded expert play it within `max_steps`; and, when
    the expert fails and `planner` is set, take the PDDL planner expert's whole plan (what
    `AlfredExpert(expert_type='planner')` reports) and play it. `seed` seeds Python's global `random`,
    which the handcoded expert draws from. The expert and the planner are bounded in CPU seconds
    (`expert_cpu_s`, `planner_cpu_s`: a verdict that does not depend on how busy the machine is), every
    step of the check in wall time by `wall_timeout_s`. Returns {"loaded", "error", "plans_won" (a bool
    per plan), "expert_actions" / "planner_actions" (the winning list or None), "expert_error",
    "planner_error" ("timeout" when out of time)}. Call it from a main thread (SIGALRM bounds the load)."""
    import random as _random

    result: dict[str, Any] = {"loaded": False, "error": "", "plans_won": [False] * len(plans),
                              "expert_actions": None, "expert_error": "", "planner_actions": None,
                              "planner_error": ""}

    try:
        with deadline(wall_timeout_s):
            env = make_env(game_file, expert="handcoded", admissible=True)
            obs0 = reset(env)
    except _Timeout:
        result["error"] = "load timeout"
        return result
    except Exception as e:  # a game the engine cannot load
        result["error"] = f"load: {type(e).__name__}: {e}"[:500]
        return result
    result["loaded"] = True

    def play(actions: list[str]) -> dict[str, Any]:
        env._gather_infos = lambda: None  # the expert wrapper must not act on these steps
        for i, a in enumerate(actions):
            state, _score, _done = env.step(a)
            if state.get("won"):
                return {"won": True, "steps": i + 1}
        return {"won": False}

    def expert() -> dict[str, Any]:
        if seed is not None:
            _random.seed(seed)
        obs, actions = obs0, []
        for _ in range(max_steps):
            if not obs.expert_plan:
                return {"error": "expert has no action"}
            action = obs.expert_plan[0]
            if action == "look" and actions.count("look") >= 9:
                # ALFWorld's wrapper says "look" whenever its expert has nothing admissible to do
                # (co-located receptacles cause a few): a tenth means it is going round in circles
                # (seen on Pick2 games); stop early
                return {"error": "expert stuck"}
            obs = step(env, action)
            actions.append(action)
            if obs.won:
                return {"actions": actions}
            if obs.done:
                return {"error": "expert lost"}
        return {"error": f"expert did not win within {max_steps} steps"}

    def planner_plan() -> dict[str, Any]:
        plan = list(env._pddl_state.replan(env._entity_infos) or [])
        if not plan:
            return {"error": "no plan"}
        if len(plan) > max_steps:
            return {"error": f"plan longer than {max_steps} steps"}
        out = play(plan)
        return {"actions": plan} if out["won"] else {"error": "plan did not win"}

    try:
        for i, plan in enumerate(plans):
            result["plans_won"][i] = bool(_in_fork(lambda p=list(plan): play(p), wall_timeout_s,
                                                   expert_cpu_s).get("won"))
        r = _in_fork(expert, wall_timeout_s, expert_cpu_s)
        result["expert_actions"], result["expert_error"] = r.get("actions"), r.get("error", "")
        if result["expert_actions"] is None and planner:
            r = _in_fork(planner_plan, wall_timeout_s, planner_cpu_s)
            result["planner_actions"], result["planner_error"] = r.get("actions"), r.get("error", "")
    finally:
        try:
            env.close()
        except Exception:
            pass
    return result


__all__ += ["check_game", "enable_parse_cache"]
