"""The one way to play an episode: a step-wise session that anything can drive.

    session = EpisodeSession(program, engine, model_name="my-model", sample=0, bank=bank.snapshot())
    prompt = await session.reset(game)              # the first Prompt, or None if it ended at once
    while prompt is not None:
        reply = await policy(prompt)                # a Reply (with token ids / logprobs) or plain text
        prompt = await session.step(reply)          # the next Prompt, or None when the episode is over
    await session.close()
    trajectory = session.trajectory

The evaluator's model loop (`runtime.episode.run_episode`), a TRL rollout, the expert teacher (which
reads `prompt.observation.expert_plan`, the engine's own plan) and a supervisor all drive this object.
A `supervisor` given to the session sees every action after the guard and before the engine
(`await supervisor.review(action, prompt) -> action`) and may approve it or replace it.

Per turn: render (in a worker thread, under the renderer's time and size budget) -> reply -> parse ->
meta-action, or guard -> supervisor -> engine -> workspace update. A failure of the harness (a template
over budget, a broken reply) is recorded and the episode goes on or ends on its merits (status `ok`); a
failure of the infrastructure (engine error; the driver's `fail_infra` for a model that cannot be
reached) ends it with status `infra_error`. Nothing here raises for a single game."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from harnevo.envs.games import Game
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.guard import guard
from harnevo.harness.parse import ParsedReply, parse_reply
from harnevo.harness.render import Renderer, RenderError
from harnevo.harness.spec import META_ACTIONS, Harness
from harnevo.harness.task import parse_task_goal, split_first_observation
from harnevo.harness.workspace import Workspace
from harnevo.models.base import Message, Reply
from harnevo.runtime.trajectory import Trajectory, Turn, episode_key


class EngineEpisodeLike(Protocol):
    first: Any
    forked_from_cache: bool
    start_seconds: float

    async def step(self, action: str) -> Any: ...
    async def close(self) -> None: ...


class EngineLike(Protocol):
    async def new_episode(self, game_file: str) -> EngineEpisodeLike: ...


@dataclass(frozen=True)
class Prompt:
    """What a policy is asked to answer: the harness's messages, plus what the engine last said (its
    `Observation`: text, admissible commands, and the expert's plan when the pool runs an expert)."""

    messages: list[Message]
    observation: Any
    step: int  # steps spent before this turn
    turn: int  # turns played before this one (meta-actions may be free of steps)
    temperature: float
    max_tokens: int


class Supervisor(Protocol):
    async def review(self, action: str, prompt: Prompt) -> str:
        """The action to send to the engine: `action` itself to approve it, another to replace it."""
        ...


@dataclass
class _Step:
    action: str
    observation: str


class HarnessProgram:
    """A harness compiled once for many episodes (templates parsed a single time)."""

    def __init__(self, harness: Harness):
        self.harness = harness
        self.renderer = Renderer(harness.template_sources())
        self.meta_enabled = harness.mode == "inline"

    def parse(self, text: str) -> ParsedReply:
        return parse_reply(text, meta_actions=self.meta_enabled, bare_line=self.harness.reply.bare_line_fallback)

    def context(self, ws: Workspace, *, task: str, room: str, observation: str, last_action: str,
                admissible: list[str], history: list[_Step], step: int, guard_note: str = "") -> dict[str, Any]:
        h = self.harness
        window = h.memory.history_window
        shown = history[:-1][-window:] if window > 0 else []
        return {
            "task": task, "room": room, "observation": observation, "last_action": last_action,
            "admissible": admissible,
            "history": [{"action": s.action, "observation": s.observation} for s in shown],
            "step": step + 1, "max_steps": h.budget.max_steps, "steps_left": h.budget.max_steps - step,
            "mode": h.mode, "meta_actions": list(META_ACTIONS) if self.meta_enabled else [],
            "guard_note": guard_note,
            **ws.panels(h.mode),
        }


@dataclass
class _State:
    ep: EngineEpisodeLike
    ws: Workspace
    task: str
    room: str
    engine_obs: Any
    observation: str
    last_action: str = ""
    guard_note: str = ""
    admissible: list[str] = field(default_factory=list)
    history: list[_Step] = field(default_factory=list)
    steps: int = 0
    turns_left: int = 0


class EpisodeSession:
    def __init__(self, program: HarnessProgram, engine: EngineLike, *, model_name: str = "policy",
                 simulated: bool = False, sample: int = 0, bank: ExperienceBank | None = None,
                 supervisor: Supervisor | None = None):
        self.program, self.engine = program, engine
        self.model_name, self.simulated, self.sample = model_name, simulated, sample
        self.bank, self.supervisor = bank, supervisor
        self.trajectory: Trajectory | None = None
        self.done = False
        self._s: _State | None = None
        self._prompt: Prompt | None = None
        self._t0 = 0.0

    # --- driving ---------------------------------------------------------------------------------------
    async def reset(self, game: Game) -> Prompt | None:
        from harnevo.envs.pool import EngineError

        if self.trajectory is not None:
            raise RuntimeError("an EpisodeSession plays one episode; make a new one for the next game")
        h = self.program.harness
        self._t0 = time.perf_counter()
        self.trajectory = traj = Trajectory(
            key=episode_key(h.behaviour_id, self.model_name, game.split, game.name, self.sample),
            harness_id=h.id, behaviour_id=h.behaviour_id, harness_name=h.name, model=self.model_name,
            simulated=self.simulated, split=game.split, game=game.name, game_path=game.path, family=game.family,
            sample=self.sample, bank_seen=self.bank.fingerprint() if self.bank is not None else "")
        try:
            ep = await self.engine.new_episode(game.path)
        except EngineError as e:
            return self._end_infra(f"engine error: {e}")
        traj.engine_start_seconds, traj.forked_from_cache = ep.start_seconds, ep.forked_from_cache
        first = ep.first
        room, task = split_first_observation(first.text)
        traj.task = task
        ws = Workspace.start(h.memory, parse_task_goal(task), room, self.bank)
        self._s = _State(ep=ep, ws=ws, task=task, room=room, engine_obs=first, observation=room,
                         admissible=list(first.admissible), turns_left=2 * h.budget.max_steps)
        return await self._next_prompt()

    async def step(self, reply: Reply | str) -> Prompt | None:
        """Play one reply. Returns the next prompt, or None once the episode is over."""
        from harnevo.envs.pool import EngineError

        if self.done or self._s is None or self._prompt is None:
            raise RuntimeError("step() after the episode ended (or before reset())")
        reply = reply if isinstance(reply, Reply) else Reply(text=str(reply))
        s, h, traj, prompt = self._s, self.program.harness, self.trajectory, self._prompt
        assert traj is not None
        parsed = self.program.parse(reply.text)
        turn = Turn(step=s.steps, messages=prompt.messages, reply=reply.text, action=parsed.action,
                    prompt_tokens=reply.usage.prompt_tokens, completion_tokens=reply.usage.completion_tokens,
                    cost_usd=reply.usage.cost_usd, spent_usd=0.0 if reply.cached else reply.usage.cost_usd,
                    latency_s=reply.latency_s, cached=reply.cached, retries=reply.retries,
                    finish_reason=reply.finish_reason)
        s.guard_note = ""
        try:
            if parsed.error:
                s.steps += 1
                traj.invalid_replies += 1
                why = f"truncated at max_tokens ({parsed.error})" if reply.truncated else parsed.error
                turn.invalid = why
                s.observation = f"Invalid reply: {why}. Reply with 'Action: <command>'."
                s.last_action = ""
            elif parsed.meta:
                name, arg = parsed.meta
                turn.meta = parsed.text
                traj.meta_actions += 1
                s.steps += int(h.budget.meta_actions_spend_budget)
                s.observation, s.last_action = s.ws.meta(name, arg), parsed.text
            else:
                g = guard(h.guard, parsed.action or "", s.admissible)
                turn.guard_note = g.note
                s.steps += 1
                if g.action is None:
                    s.observation, s.last_action = g.note or "Not admissible.", parsed.action or ""
                else:
                    action = await self._supervise(g.action, turn, prompt)
                    if action is None:
                        return None
                    s.guard_note = g.note or ""
                    obs = await s.ep.step(action)
                    traj.env_actions += 1
                    turn.executed = action
                    turn.expert_plan = obs.expert_plan or None
                    s.engine_obs = obs
                    s.observation, s.last_action, s.admissible = obs.text, action, list(obs.admissible)
                    s.ws.observe(obs.text)
                    turn.won = bool(obs.won)
        except EngineError as e:
            return self._end_infra(f"engine error: {e}")
        turn.observation = s.observation
        turn.step = traj.steps = s.steps
        traj.add_turn(turn)
        s.history.append(_Step(s.last_action or parsed.text or "(invalid)", s.observation))
        if turn.won:
            traj.success, traj.reason = True, "won"
            return self._end()
        if s.steps >= h.budget.max_steps or s.turns_left <= 0:
            traj.reason = "step budget exhausted"
            return self._end()
        return await self._next_prompt()

    def fail_infra(self, reason: str) -> None:
        """The driver could not get a reply for good (model unreachable after retries): not a result."""
        self._end_infra(reason)

    async def close(self) -> None:
        if self._s is not None:
            ep, self._s = self._s.ep, None
            await ep.close()
        if self.trajectory is not None and not self.trajectory.wall_seconds:
            self.trajectory.wall_seconds = time.perf_counter() - self._t0

    # --- inside ----------------------------------------------------------------------------------------
    async def _next_prompt(self) -> Prompt | None:
        s, h = self._s, self.program.harness
        assert s is not None and self.trajectory is not None
        s.turns_left -= 1
        ctx = self.program.context(s.ws, task=s.task, room=s.room, observation=s.observation,
                                   last_action=s.last_action, admissible=s.admissible, history=s.history,
                                   step=s.steps, guard_note=s.guard_note)
        try:
            messages = await asyncio.to_thread(self.program.renderer.messages, ctx)
        except RenderError as e:
            self.trajectory.reason = f"render error: {e}"
            return self._end()
        self._prompt = Prompt(messages=messages, observation=s.engine_obs, step=s.steps,
                              turn=len(self.trajectory.turns), temperature=h.model.temperature,
                              max_tokens=h.model.max_tokens)
        return self._prompt

    async def _supervise(self, action: str, turn: Turn, prompt: Prompt) -> str | None:
        if self.supervisor is None:
            return action
        from harnevo.errors import ModelCallError

        try:
            final = (await self.supervisor.review(action, prompt)).strip()
        except ModelCallError as e:
            self._end_infra(f"model call failed: supervisor: {e}")
            return None
        if final and final != action:
            turn.supervisor = f"replaced '{action}'"
            assert self.trajectory is not None
            self.trajectory.supervisor_interventions += 1
            return final
        turn.supervisor = "approved"
        return action

    def _end(self) -> None:
        self.done = True
        self._prompt = None
        traj = self.trajectory
        assert traj is not None
        if self._s is not None and traj.ok:
            self._s.ws.finish(traj.success)
            traj.bank_edits = list(self._s.ws.bank_edits)
        return None

    def _end_infra(self, reason: str) -> None:
        assert self.trajectory is not None
        self.trajectory.fail_infra(reason)
        self.trajectory.bank_edits = []  # not a result: it teaches nothing
        self.done = True
        self._prompt = None
        return None
