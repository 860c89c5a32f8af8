"""The sim's own reading of the task sentence. Deliberately separate from the harness's
`harnevo.harness.task.TaskGoal`: the sim reads only the text of its messages, as a model would, and
shares no code with the harness that wrote them."""

from __future__ import annotations

import re
from dataclasses import dataclass

_GOAL_PATTERNS: list[tuple[str, str]] = [
    ("look", r"look at (?:a |an |the |some )?([a-z]+) under the ([a-z]+)"),
    ("look", r"examine the ([a-z]+) with the ([a-z]+)"),
    ("pick2", r"(?:put|place) two ([a-z]+) (?:in|on|into|onto|in/on) (?:the )?([a-z]+)"),
    ("pick2", r"find two ([a-z]+) and put them (?:in|on|into|onto|in/on) (?:the )?([a-z]+)"),
    ("adj", r"put (?:a|an|some) (clean|hot|cool|cold) ([a-z]+) (?:in|on|into|onto|in/on) (?:the )?([a-z]+)"),
    ("verb", r"(clean|heat|cool) (?:a|an|some|the) ([a-z]+) and put it (?:in|on|into|onto|in/on) "
             r"(?:the )?([a-z]+)"),
    ("pick", r"put (?:a|an|some|the) ([a-z]+) (?:in|on|into|onto|in/on) (?:the )?([a-z]+)"),
]
_ADJ_FAMILY = {"clean": "clean", "hot": "heat", "cool": "cool", "cold": "cool"}


@dataclass(frozen=True)
class SimGoal:
    family: str  # pick | look | clean | heat | cool | pick2
    obj: str  # object type, e.g. "apple"
    target: str  # receptacle type; the lamp type for look
    text: str = ""


def read_goal(text: str) -> SimGoal | None:
    """The goal in a message: the line after 'Your task is to:' when there is one, else anywhere."""
    m = re.search(r"Your task is to:\s*([^\n]*)", text)
    cands = [m.group(1)] if m else []
    cands.append(text)
    for cand in cands:
        low = cand.lower()
        for fam, pat in _GOAL_PATTERNS:
            g = re.search(pat, low)
            if not g:
                continue
            if fam == "adj":
                return SimGoal(_ADJ_FAMILY[g.group(1)], g.group(2), g.group(3), cand.strip())
            if fam == "verb":
                return SimGoal(g.group(1), g.group(2), g.group(3), cand.strip())
            return SimGoal(fam, g.group(1), g.group(2), cand.strip())
    return None
