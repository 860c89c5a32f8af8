"""One episode with a `Model`: a thin driver of the step-wise `EpisodeSession` (runtime/session.py).

The session owns the harness (render, parse, guard, workspace, engine); this driver only asks the model
for each reply. A model that cannot be reached after its retries makes the episode an `infra_error`
(not a result); `BudgetExhausted` propagates so the evaluator can abandon the episode unrecorded."""

from __future__ import annotations

from harnevo.envs.games import Game
from harnevo.errors import ModelCallError
from harnevo.harness.experience import ExperienceBank
from harnevo.models.base import Model
from harnevo.runtime.session import EngineLike, EpisodeSession, HarnessProgram, Supervisor
from harnevo.runtime.trajectory import Trajectory

__all__ = ["EngineLike", "HarnessProgram", "run_episode"]


async def run_episode(program: HarnessProgram, model: Model, engine: EngineLike, game: Game, *,
                      sample: int = 0, bank: ExperienceBank | None = None,
                      supervisor: Supervisor | None = None) -> Trajectory:
    """Play `game` with `model` under `program`. `bank` is read as given: pass the episode's snapshot."""
    session = EpisodeSession(program, engine, model_name=model.name, simulated=model.simulated, sample=sample,
                             bank=bank, supervisor=supervisor)
    try:
        prompt = await session.reset(game)
        while prompt is not None:
            try:
                reply = await model.complete(prompt.messages, temperature=prompt.temperature,
                                             max_tokens=prompt.max_tokens, sample=sample)
            except ModelCallError as e:
                session.fail_infra(f"model call failed: {e}")
                break
            prompt = await session.step(reply)
    finally:
        await session.close()
    assert session.trajectory is not None
    return session.trajectory
