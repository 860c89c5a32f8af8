"""The words of the messages every part of the sim reads: ALFWorld names (`apple 1`, `countertop 2`),
their types, and the four meta-action words."""

from __future__ import annotations

import re

NAME = r"[a-z]+ \d+"  # an object or receptacle as the engine names it
META = ("track", "commit", "recall", "note")


def type_of(name: str) -> str:
    """'apple 1' -> 'apple'."""
    return name.rsplit(" ", 1)[0] if name else ""


def names_in(text: str) -> list[str]:
    """Every ALFWorld name in `text`, in order."""
    return re.findall(r"\b" + NAME + r"\b", text or "")
