"""Action guards: what happens to a command the engine would not accept.

none                   send it as written (the engine answers "Nothing happens.")
nearest_admissible     replace it with the most similar admissible command, when one is similar enough;
                       this may change an object's number ("take apple 2 ..." -> "take apple 1 ...")
nearest_same_objects   replace it with the most similar admissible command that names exactly the same
                       object instances, in the same order (same words and numbers): it fixes the verb,
                       a typo or the old "put X in/on Y" syntax, never which object is meant; otherwise
                       the command is sent as written
reject                 do not send it; the step is spent and the model is told it was not admissible
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

NEAREST_CUTOFF = 0.6
GUARDS = ("none", "nearest_admissible", "nearest_same_objects", "reject")
_INSTANCE = re.compile(r"\b([a-z]+) (\d+)\b")


@dataclass(frozen=True)
class Guarded:
    action: str | None  # what goes to the engine; None when rejected
    note: str | None = None  # what the guard did, for the trajectory and the next observation


def _key(cmd: str) -> str:
    # old ALFWorld syntax "put X in/on Y" is "move X to Y" in this engine
    for old in (" in/on ", " in ", " on "):
        if cmd.startswith("put ") and old in cmd:
            obj, _, rec = cmd[4:].partition(old)
            return f"move {obj} to {rec}"
    return cmd


def object_instances(cmd: str) -> tuple[str, ...]:
    """The object instances a command names, in order: "take apple 2 from countertop 1" ->
    ("apple 2", "countertop 1")."""
    return tuple(f"{word} {number}" for word, number in _INSTANCE.findall(cmd))


def _nearest(action: str, candidates: list[str]) -> Guarded:
    key = _key(action)
    if key in candidates:
        return Guarded(key, f"'{action}' read as '{key}'")
    best = difflib.get_close_matches(key, candidates, n=1, cutoff=NEAREST_CUTOFF)
    if best:
        return Guarded(best[0], f"'{action}' read as '{best[0]}'")
    return Guarded(action)


def guard(kind: str, action: str, admissible: list[str]) -> Guarded:
    if kind not in GUARDS:
        raise ValueError(f"unknown guard {kind!r}")
    if kind == "none" or not admissible or action in admissible:
        return Guarded(action)
    if kind == "reject":
        return Guarded(None, f"'{action}' is not an admissible action.")
    if kind == "nearest_admissible":
        return _nearest(action, admissible)
    same = object_instances(_key(action))
    return _nearest(action, [a for a in admissible if object_instances(a) == same])
