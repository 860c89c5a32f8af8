"""The step-wise episode API driven from outside (a scripted policy, a supervisor, the expert's plan), and
the evaluator's loop through it reproducing the trajectories of the loop it replaced."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from harnevo.envs.games import load_games
from harnevo.envs.pool import EnginePool
from harnevo.harness.spec import load_harness
from harnevo.models import get_model
from harnevo.models.base import Reply, Usage
from harnevo.runtime.evaluate import evaluate
from harnevo.runtime.session import EpisodeSession, HarnessProgram

DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "loop_golden.json").read_text())


def _walkthrough(game) -> list[str]:
    return list(json.loads(Path(game.path).read_text())["walkthrough"])


def _games(alfworld_data, names):
    by_name = {g.name: g for g in load_games("valid_seen", data=alfworld_data)}
    return [by_name[n] for n in names]


@pytest.fixture(scope="module")
def golden_games(alfworld_data):
    return _games(alfworld_data, GOLDEN["games"])


def test_scripted_policy_drives_an_episode_and_a_supervisor_replaces_an_action(golden_games):
    game = golden_games[0]
    program = HarnessProgram(load_harness("bpe_always_on"))

    class FixFirst:
        """A supervisor that rewrites the first action into the engine's first expert-free choice."""

        def __init__(self):
            self.seen = []

        async def review(self, action, prompt):
            self.seen.append((action, list(prompt.observation.admissible)))
            return "look" if len(self.seen) == 1 else action

    async def play():
        async with EnginePool(workers=1) as pool:
            sup = FixFirst()
            session = EpisodeSession(program, pool, model_name="scripted", sample=0, supervisor=sup)
            prompt = await session.reset(game)
            assert prompt is not None and prompt.messages[0]["role"] == "system"
            assert prompt.observation.admissible and prompt.step == 0
            plan = ["inventory"] + _walkthrough(game)  # the supervisor turns "inventory" into "look"
            while prompt is not None:
                action = plan.pop(0) if plan else "look"
                prompt = await session.step(Reply(text=f"Think: go on.\nAction: {action}", usage=Usage(5, 3, 0.0),
                                                  finish_reason="stop", token_ids=[1, 2, 3], logprobs=[-0.1] * 3))
            await session.close()
            return session.trajectory, sup

    traj, sup = asyncio.run(play())
    assert traj.success and traj.reason == "won" and traj.status == "ok"
    assert traj.turns[0].supervisor == "replaced 'inventory'" and traj.turns[0].executed == "look"
    assert all(t.supervisor == "approved" for t in traj.turns[1:])
    assert traj.supervisor_interventions == 1 and len(sup.seen) == len(traj.turns)
    assert traj.turns[0].finish_reason == "stop"
    with pytest.raises(RuntimeError):
        asyncio.run(EpisodeSession(program, None).step("Action: look"))


def test_expert_policy_reads_the_engines_plan(golden_games):
    """A teacher that acts on the engine's Observation (the handcoded expert's plan), not on messages."""
    game = next(g for g in golden_games if g.family == "pick")
    program = HarnessProgram(load_harness("react"))

    async def play():
        async with EnginePool(workers=1, expert="handcoded") as pool:
            session = EpisodeSession(program, pool, model_name="expert")
            prompt = await session.reset(game)
            while prompt is not None:
                prompt = await session.step(f"Action: {prompt.observation.expert_plan[0]}")
            await session.close()
            return session.trajectory

    traj = asyncio.run(play())
    assert traj.success and traj.steps <= 10


def _digest(messages) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("harness", ["react", "bpe_no_exp"])
def test_apply_gives_the_same_trajectories_as_the_loop_it_replaced(harness, golden_games, tmp_path):
    """The golden file was written by the pre-session loop (commit f113d2d) on these games: every message,
    reply, executed action and observation must come out the same through the step-wise session."""
    h = load_harness("react" if harness == "react" else str(DATA / "bpe_no_experience.yaml"))

    async def run():
        async with EnginePool(workers=2) as pool:
            return await evaluate(h, get_model("sim/bounded"), golden_games, pool, out=tmp_path / harness,
                                  concurrency=4)

    result = asyncio.run(run())
    want = GOLDEN["harnesses"][harness]
    got = {t.game: t for t in result.trajectories}
    assert sorted(got) == sorted(want)
    for game, w in want.items():
        t = got[game]
        assert (t.success, t.reason, t.steps) == (w["success"], w["reason"], w["steps"]), game
        turns = [[_digest(x.messages), x.reply, x.executed, x.observation] for x in t.turns]
        assert turns == w["turns"], game
