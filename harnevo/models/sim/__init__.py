"""Simulated ALFWorld agents: `sim/bounded`, `sim/random`, `sim/latency` (model names `sim/<name>?k=v&...`).

They exist for dry runs, tests and benchmarks, and every result made with them is labelled simulated.
They act ONLY on the text of the messages of the current call: no game file, no engine, no state kept
between calls. `sim/bounded` reads the goal, the room, the visible history, the panels (Belief,
Progress, Experience), the current observation and the admissible actions, rebuilds what it can of the
world from that text, and plans the next command. What it does not see it does not know: with a short
history window and no Belief panel it forgets where it already looked and searches again. It lapses (a
wrong or malformed action) with probability

    p = lapse + per_1k_tokens * prompt_tokens / 1000

so long prompts cost it, as long contexts cost real models. Its randomness is a `random.Random` seeded
with a sha256 of (seed, sample, the full message text): the same messages give the same reply.

The modules, in the order a reply is made:
    text.py       the words of the messages: ALFWorld names, their types, meta-action words
    goal.py       the task sentence -> SimGoal (the sim's own reading; it never imports the harness's)
    panels.py     Belief / Progress / Experience panels, line by line
    world.py      World: the facts engine sentences, history entries and panels give
    reading.py    messages -> View (sections, history entries, admissible list, panels, observation)
    knowledge.py  where object types usually are; openable receptacles; appliances
    planner.py    View -> the next Step (a command or a meta-action)
    agents.py     BoundedAgent, LatencyAgent, RandomAgent; lapses
    spec.py       make_sim: a `sim/...` model name -> an agent
"""

from harnevo.models.sim.agents import BoundedAgent, Decision, LatencyAgent, RandomAgent, SimModel, prompt_tokens
from harnevo.models.sim.goal import SimGoal, read_goal
from harnevo.models.sim.panels import BeliefRead, ExperienceRead, ProgressRead
from harnevo.models.sim.planner import Step, plan_step
from harnevo.models.sim.reading import View, read_messages
from harnevo.models.sim.spec import make_sim
from harnevo.models.sim.world import World

__all__ = [
    "BeliefRead",
    "BoundedAgent",
    "Decision",
    "ExperienceRead",
    "LatencyAgent",
    "ProgressRead",
    "RandomAgent",
    "SimGoal",
    "SimModel",
    "Step",
    "View",
    "World",
    "make_sim",
    "plan_step",
    "prompt_tokens",
    "read_goal",
    "read_messages",
]
