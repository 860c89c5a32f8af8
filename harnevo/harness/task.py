"""The goal of an ALFWorld game as harness code reads it from the first observation: the task sentence,
the room description, and a parse of the goal (family, object type, target) used to seed Progress.

`TaskGoal`/`parse_task_goal` are the harness's. The simulated agents read the task on their own
(`harnevo.models.sim.goal.SimGoal`/`read_goal`), from the message text only, and never import these."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TASK_LINE = re.compile(r"Your task is to:\s*(.+?)\s*$", re.M | re.I)
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("look", re.compile(r"^(?:look at|examine) (?:the |a |some )?(\w+) (?:under|with) (?:the )?(\w+)")),
    ("pick2", re.compile(r"^(?:put|find) two (\w+?)s? (?:and put them )?(?:in|on|in/on) (?:the |a )?(\w+)")),
    ("clean", re.compile(r"^(?:put a clean (\w+) (?:in|on) |clean (?:some|a|the) (\w+) and put it (?:in|on) )(?:the |a )?(\w+)")),
    ("heat", re.compile(r"^(?:put a hot (\w+) (?:in|on) |heat (?:some|a|the) (\w+) and put it (?:in|on) )(?:the |a )?(\w+)")),
    ("cool", re.compile(r"^(?:put a cool (\w+) (?:in|on) |cool (?:some|a|the) (\w+) and put it (?:in|on) )(?:the |a )?(\w+)")),
    ("pick", re.compile(r"^put (?:a|an|some|the) (\w+) (?:in|on|in/on) (?:the |a )?(\w+)")),
]


@dataclass(frozen=True)
class TaskGoal:
    text: str  # "put a clean apple in fridge."
    family: str | None  # pick, look, clean, heat, cool, pick2; None when the sentence is not recognised
    obj: str | None  # "apple"
    target: str | None  # "fridge" (the lamp for look tasks)

    def subgoals(self) -> list[str]:
        """The plan a careful agent follows, as Progress items."""
        o, t = self.obj or "the object", self.target or "the target"
        plans = {
            "pick": [f"find {o}", f"take {o}", f"put {o} in/on {t}"],
            "look": [f"find {o}", f"take {o}", f"find {t}", f"use {t}"],
            "clean": [f"find {o}", f"take {o}", f"clean {o} with sinkbasin", f"put {o} in/on {t}"],
            "heat": [f"find {o}", f"take {o}", f"heat {o} with microwave", f"put {o} in/on {t}"],
            "cool": [f"find {o}", f"take {o}", f"cool {o} with fridge", f"put {o} in/on {t}"],
            "pick2": [f"find first {o}", f"put first {o} in/on {t}", f"find second {o}", f"put second {o} in/on {t}"],
        }
        return plans.get(self.family or "", [])


def split_first_observation(text: str) -> tuple[str, str]:
    """(room description, task sentence) from ALFWorld's first observation (banner dropped)."""
    m = _TASK_LINE.search(text)
    task = m.group(1).strip() if m else ""
    room = text[: m.start()] if m else text
    room = re.sub(r"-=\s*Welcome to TextWorld, ALFRED!\s*=-", "", room).strip()
    return room, task


def parse_task_goal(task: str) -> TaskGoal:
    s = task.strip().lower().rstrip(".")
    for family, pat in _PATTERNS:
        m = pat.match(s)
        if m:
            groups = [g for g in m.groups() if g]
            obj, target = groups[0], groups[-1]
            return TaskGoal(text=task, family=family, obj=obj, target=target)
    return TaskGoal(text=task, family=None, obj=None, target=None)

