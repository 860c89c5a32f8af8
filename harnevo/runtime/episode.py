"""One episode with a `Model`: a thin driver of the step-wise `EpisodeSession` (runtime/session.py).

The session owns the harness (render, parse, guard, workspace, engine); this driver only asks a policy
for each reply (`play`: any policy, e.g. collection's expert teacher; `run_episode`: a Model). A model
that cannot be reached after its retries makes the episode an `infra_error` (not a result);
`BudgetExhausted` propagates so the evaluator can abandon the episode unrecorded."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from harnevo.envs.games import Game
from harnevo.errors import ModelCallError
from harnevo.harness.experience import ExperienceBank
from harnevo.models.base import Model
from harnevo.runtime.session import EngineLike, EpisodeSession, HarnessProgram, Supervisor
from harnevo.runtime.trajectory import Trajectory

__all__ = ["EngineLike", "HarnessProgram", "Policy", "model_policy", "play", "run_episode"]

Policy = Callable[[Any], Awaitable[Any]]  # Prompt -> a reply; None ends the episode (the policy recorded why)


async def play(session: EpisodeSession, game: Game, policy: Policy) -> Trajectory:
    """Reset `session` on `game`, then send `policy`'s reply to every prompt until the episode ends (or the
    policy returns None, having failed the session); the session is closed whatever happens."""
    try:
        prompt = await session.reset(game)
        while prompt is not None:
            reply = await policy(prompt)
            if reply is None:
                break
            prompt = await session.step(reply)
    finally:
        await session.close()
    assert session.trajectory is not None
    return session.trajectory


def model_policy(model: Model, session: EpisodeSession, sample: int = 0) -> Policy:
    """Ask `model` as the prompt says (temperature, reply cap); an unreachable model fails the episode as
    infrastructure, never as a result."""
    async def reply(prompt):
        try:
            return await model.complete(prompt.messages, temperature=prompt.temperature,
                                        max_tokens=prompt.max_tokens, sample=sample)
        except ModelCallError as e:
            session.fail_infra(f"model call failed: {e}")
            return None
    return reply


async def run_episode(program: HarnessProgram, model: Model, engine: EngineLike, game: Game, *,
                      sample: int = 0, bank: ExperienceBank | None = None,
                      supervisor: Supervisor | None = None) -> Trajectory:
    """Play `game` with `model` under `program`. `bank` is read as given: pass the episode's snapshot."""
    session = EpisodeSession(program, engine, model_name=model.name, simulated=model.simulated, sample=sample,
                             bank=bank, supervisor=supervisor)
    return await play(session, game, model_policy(model, session, sample))
