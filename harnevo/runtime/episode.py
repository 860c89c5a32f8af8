"""One episode: render -> model -> parse -> guard -> step -> update workspace, until won or out of steps.

Every failure inside an episode (engine, model, template) ends it with `success=False` and a reason;
nothing here raises for a single game."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from harnevo.envs.games import Game
from harnevo.errors import ModelCallError
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.guard import guard
from harnevo.harness.parse import parse_reply
from harnevo.harness.render import Renderer, RenderError
from harnevo.harness.spec import META_ACTIONS, Harness
from harnevo.harness.task import parse_goal, split_first_observation
from harnevo.harness.workspace import Workspace
from harnevo.models.base import Model
from harnevo.runtime.trajectory import Trajectory, Turn, episode_key


class EngineEpisodeLike(Protocol):
    first: Any
    forked_from_cache: bool
    start_seconds: float

    async def step(self, action: str) -> Any: ...
    async def close(self) -> None: ...


class EngineLike(Protocol):
    async def new_episode(self, game_file: str) -> EngineEpisodeLike: ...


@dataclass
class _Step:
    action: str
    observation: str


class HarnessProgram:
    """A harness compiled once for many episodes (templates parsed a single time)."""

    def __init__(self, harness: Harness):
        self.harness = harness
        self.renderer = Renderer(harness.templates)
        self.meta_enabled = harness.mode == "inline"

    def context(self, ws: Workspace, *, task: str, room: str, observation: str, last_action: str,
                admissible: list[str], history: list[_Step], step: int) -> dict[str, Any]:
        h = self.harness
        window = h.memory.history_window
        shown = history[:-1][-window:] if window > 0 else []
        return {
            "task": task, "room": room, "observation": observation, "last_action": last_action,
            "admissible": admissible,
            "history": [{"action": s.action, "observation": s.observation} for s in shown],
            "step": step + 1, "max_steps": h.budget.max_steps, "steps_left": h.budget.max_steps - step,
            "mode": h.mode, "meta_actions": list(META_ACTIONS) if self.meta_enabled else [],
            **ws.panels(h.mode),
        }


async def run_episode(program: HarnessProgram, model: Model, engine: EngineLike, game: Game, *,
                      sample: int = 0, bank: ExperienceBank | None = None) -> Trajectory:
    h = program.harness
    traj = Trajectory(key=episode_key(h.id, model.name, game.split, game.name, sample), harness_id=h.id,
                      harness_name=h.name, model=model.name, simulated=model.simulated, split=game.split,
                      game=game.name, game_path=game.path, family=game.family, sample=sample)
    t0 = time.perf_counter()
    try:
        await _play(program, model, engine, game, traj, sample=sample, bank=bank)
    finally:
        traj.wall_seconds = time.perf_counter() - t0
    return traj


async def _play(program: HarnessProgram, model: Model, engine: EngineLike, game: Game, traj: Trajectory, *,
                sample: int, bank: ExperienceBank | None) -> None:
    from harnevo.envs.pool import EngineError

    h = program.harness
    try:
        ep = await engine.new_episode(game.path)
    except EngineError as e:
        traj.reason = f"engine error: {e}"
        return
    traj.engine_start_seconds, traj.forked_from_cache = ep.start_seconds, ep.forked_from_cache
    try:
        first = ep.first
        room, task = split_first_observation(first.text)
        traj.task = task
        ws = Workspace.start(h.memory, parse_goal(task), room, bank)
        observation, last_action, admissible = room, "", list(first.admissible)
        history: list[_Step] = []
        steps, turns_left = 0, 2 * h.budget.max_steps  # free meta-actions cannot loop forever
        while steps < h.budget.max_steps and turns_left > 0:
            turns_left -= 1
            ctx = program.context(ws, task=task, room=room, observation=observation, last_action=last_action,
                                  admissible=admissible, history=history, step=steps)
            try:
                messages = program.renderer.messages(ctx)
            except RenderError as e:
                traj.reason = f"render error: {e}"
                return
            try:
                reply = await model.complete(messages, temperature=h.model.temperature,
                                             max_tokens=h.model.max_tokens, sample=sample)
            except ModelCallError as e:
                traj.reason = f"model call failed: {e}"
                return
            parsed = parse_reply(reply.text, meta_actions=program.meta_enabled)
            turn = Turn(step=steps, messages=messages, reply=reply.text, action=parsed.action,
                        prompt_tokens=reply.usage.prompt_tokens, completion_tokens=reply.usage.completion_tokens,
                        cost_usd=reply.usage.cost_usd, latency_s=reply.latency_s, cached=reply.cached,
                        retries=reply.retries)
            if parsed.error:
                steps += 1
                traj.invalid_replies += 1
                turn.invalid = parsed.error
                observation = f"Invalid reply: {parsed.error}. Reply with 'Action: <command>'."
                last_action = ""
            elif parsed.meta:
                name, arg = parsed.meta
                turn.meta = parsed.text
                traj.meta_actions += 1
                steps += int(h.budget.meta_actions_spend_budget)
                observation, last_action = ws.meta(name, arg), parsed.text
            else:
                g = guard(h.guard, parsed.action or "", admissible)
                turn.guard_note = g.note
                steps += 1
                if g.action is None:
                    observation, last_action = g.note or "Not admissible.", parsed.action or ""
                else:
                    obs = await ep.step(g.action)
                    traj.env_actions += 1
                    turn.executed = g.action
                    turn.expert_plan = obs.expert_plan or None
                    observation, last_action, admissible = obs.text, g.action, list(obs.admissible)
                    ws.observe(obs.text)
                    if obs.won:
                        turn.won = True
            turn.observation = observation
            turn.step = traj.steps = steps
            traj.add_turn(turn)
            history.append(_Step(last_action or parsed.text or "(invalid)", observation))
            if turn.won:
                traj.success, traj.reason = True, "won"
                break
        if not traj.success:
            traj.reason = "step budget exhausted"
        ws.finish(traj.success)
    except EngineError as e:
        traj.reason = f"engine error: {e}"
    finally:
        await ep.close()
