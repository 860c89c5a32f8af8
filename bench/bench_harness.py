"""Harness overhead per step: render + parse + workspace update, for each seed harness.

Uses recorded ALFWorld observations (a stored walkthrough replayed once in the real engine), then
times the harness side alone, so the figure is what harnevo adds on top of the engine and the model.
Run: python bench/bench_harness.py [--data DIR] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from harnevo.envs import alfworld
from harnevo.envs.games import load_games
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.parse import parse_reply
from harnevo.harness.guard import guard
from harnevo.harness.spec import load_harness
from harnevo.harness.task import parse_task_goal, split_first_observation
from harnevo.harness.workspace import Workspace
from harnevo.runtime.session import HarnessProgram, _Step

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "alfworld"


def record(game_path: str) -> tuple[str, list[tuple[str, str, list[str]]]]:
    actions = json.loads(Path(game_path).read_text())["walkthrough"]
    env = alfworld.make_env(game_path)
    first = alfworld.reset(env)
    steps = []
    for a in actions:
        obs = alfworld.step(env, a)
        steps.append((a, obs.text, obs.admissible))
    env.close()
    return first.text, steps


def time_harness(name: str, first: str, steps, repeat: int) -> float:
    program = HarnessProgram(load_harness(name))
    h = program.harness
    n = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        room, task = split_first_observation(first)
        ws = Workspace.start(h.memory, parse_task_goal(task), room, ExperienceBank(None, size=20))
        history: list[_Step] = []
        obs, last, adm = room, "", steps[0][2]
        for i, (a, text, admissible) in enumerate(steps):
            msgs = program.renderer.messages(program.context(ws, task=task, room=room, observation=obs,
                                                             last_action=last, admissible=adm,
                                                             history=history, step=i))
            parsed = parse_reply(f"Think: next.\nAction: {a}", meta_actions=program.meta_enabled)
            guard(h.guard, parsed.action, adm)
            ws.observe(text)
            history.append(_Step(a, text))
            obs, last, adm = text, a, admissible
            n += 1
            assert msgs
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("ALFWORLD_DATA", str(DEFAULT_DATA)))
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    game = load_games("valid_seen", data=args.data, families=["clean"], n=1, seed=0)[0]
    first, steps = record(game.path)
    print(f"harness overhead per step (render + parse + guard + workspace update), game {game.name}, "
          f"{len(steps)} steps x {args.repeat}:")
    for name in ("react", "bpe_always_on", "bpe_inline"):
        print(f"  {name:14s} {1e6 * time_harness(name, first, steps, args.repeat):8.0f} us/step")


if __name__ == "__main__":
    main()
