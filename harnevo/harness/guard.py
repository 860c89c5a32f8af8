"""Action guards: what happens to a command the engine would not accept.

none                 send it as written (the engine answers "Nothing happens.")
nearest_admissible   replace it with the most similar admissible command, when one is similar enough
reject               do not send it; the step is spent and the model is told it was not admissible
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

NEAREST_CUTOFF = 0.6


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


def guard(kind: str, action: str, admissible: list[str]) -> Guarded:
    if kind == "none" or not admissible or action in admissible:
        return Guarded(action)
    if kind == "reject":
        return Guarded(None, f"'{action}' is not an admissible action.")
    if kind == "nearest_admissible":
        key = _key(action)
        if key in admissible:
            return Guarded(key, f"'{action}' read as '{key}'")
        best = difflib.get_close_matches(key, admissible, n=1, cutoff=NEAREST_CUTOFF)
        if best:
            return Guarded(best[0], f"'{action}' read as '{best[0]}'")
        return Guarded(action)
    raise ValueError(f"unknown guard {kind!r}")
