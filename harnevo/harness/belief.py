"""Belief: what is known about the world in this episode, kept automatically from ALFWorld observations
(which receptacles exist and were seen, what is on or in them, what is open, what the agent holds and
what state objects are in). Rendered as the Belief panel in a fixed line format (see `render`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LIST_SPLIT = re.compile(r",\s*(?:and\s+)?|\s+and\s+")
_ROOM = re.compile(r"Looking quickly around you, you see (.+?)\.\s*$", re.M)
_ARRIVE = re.compile(r"You arrive at (?:loc \d+\. )?(?:the )?([a-z]+ \d+)\.")
_ON_IN = re.compile(r"(?:On the ([a-z]+ \d+)|In it|In the ([a-z]+ \d+)), you see (.+?)\.(?:\s|$)")
_CLOSED = re.compile(r"The ([a-z]+ \d+) is closed\.")
_OPEN = re.compile(r"You open the ([a-z]+ \d+)\.")
_IS_OPEN = re.compile(r"The ([a-z]+ \d+) is open\.")
_CLOSE = re.compile(r"You close the ([a-z]+ \d+)\.")
_TAKE = re.compile(r"You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)\.")
_PUT = re.compile(r"You (?:move|put) the ([a-z]+ \d+) (?:to|in|on|in/on) the ([a-z]+ \d+)\.")
_CHANGE = re.compile(r"You (heat|cool|clean) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.")
_TURN_ON = re.compile(r"You turn on the ([a-z]+ \d+)\.")
_CARRY = re.compile(r"You are carrying: (.+?)\.")
_NOT_CARRY = re.compile(r"You are not carrying anything\.")
_STATE_WORD = {"heat": "hot", "cool": "cool", "clean": "clean"}


def object_type(name: str) -> str:
    """'apple 1' -> 'apple'; a name without a number is its own type."""
    return name.rsplit(" ", 1)[0] if name and name[-1].isdigit() else name


def split_items(text: str) -> list[str]:
    """'a apple 1, a bread 2, and a cup 1' -> ['apple 1', 'bread 2', 'cup 1']; 'nothing' -> []."""
    text = text.strip()
    if text in ("", "nothing"):
        return []
    items = []
    for part in _LIST_SPLIT.split(text):
        part = re.sub(r"^(?:a|an|the)\s+", "", part.strip())
        if part:
            items.append(part)
    return items


@dataclass
class Belief:
    receptacles: list[str] = field(default_factory=list)  # from the room description, in its order
    contents: dict[str, list[str] | None] = field(default_factory=dict)  # None: seen closed, inside unknown
    visited: list[str] = field(default_factory=list)
    opened: set[str] = field(default_factory=set)
    location: str | None = None
    holding: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    found_at: dict[str, str] = field(default_factory=dict)  # object type -> receptacle type it was taken from

    def observe_room(self, text: str) -> None:
        m = _ROOM.search(text)
        if m:
            self.receptacles = split_items(m.group(1))

    def observe(self, text: str) -> None:
        """Update from one observation of the engine (after a step)."""
        m = _ARRIVE.search(text)
        if m:
            self.location = m.group(1)
            if self.location not in self.visited:
                self.visited.append(self.location)
        for m in _OPEN.finditer(text):
            self.opened.add(m.group(1))
        for m in _IS_OPEN.finditer(text):
            self.opened.add(m.group(1))
        for m in _CLOSE.finditer(text):
            self.opened.discard(m.group(1))
        for m in _CLOSED.finditer(text):
            self.opened.discard(m.group(1))
            self.contents.setdefault(m.group(1), None)
        for m in _ON_IN.finditer(text):
            where = m.group(1) or m.group(2) or self._open_target(text) or self.location
            if where:
                self.contents[where] = split_items(m.group(3))
        m = _TAKE.search(text)
        if m:
            obj, rec = m.groups()
            if obj not in self.holding:
                self.holding.append(obj)
            self.found_at.setdefault(object_type(obj), object_type(rec))
            if self.contents.get(rec):
                self.contents[rec] = [o for o in self.contents[rec] if o != obj]
        m = _PUT.search(text)
        if m:
            obj, rec = m.groups()
            self.holding = [o for o in self.holding if o != obj]
            self.contents[rec] = [*(self.contents.get(rec) or []), obj]
        m = _CHANGE.search(text)
        if m:
            self.states[m.group(2)] = _STATE_WORD[m.group(1)]
        m = _TURN_ON.search(text)
        if m:
            self.states[m.group(1)] = "on"
        m = _CARRY.search(text)
        if m:
            self.holding = split_items(m.group(1))
        elif _NOT_CARRY.search(text):
            self.holding = []

    def _open_target(self, text: str) -> str | None:
        m = _OPEN.search(text) or _IS_OPEN.search(text)
        return m.group(1) if m else None

    def not_visited(self) -> list[str]:
        return [r for r in self.receptacles if r not in self.visited and r not in self.contents]

    def render(self, *, relevant: list[str] | None = None, query: str | None = None) -> str:
        """The Belief panel. `relevant`: object types that matter (scope 'task'); `query`: keep the lines
        that mention it (a `track <query>`), falling back to the whole panel when nothing matches."""
        lines = [f"location: {self.location or 'start'}",
                 f"holding: {', '.join(self.holding) or 'nothing'}",
                 f"open: {', '.join(sorted(self.opened)) or 'none'}",
                 "seen:"]
        seen_lines = []
        for rec, items in self.contents.items():
            if items is None:
                desc = "closed"
            else:
                shown = items
                if relevant:
                    shown = [i for i in items if object_type(i) in relevant]
                    if items and not shown:
                        desc = f"{len(items)} other object(s)"
                        seen_lines.append(f"- {rec}: {desc}")
                        continue
                desc = ", ".join(shown) or "nothing"
            seen_lines.append(f"- {rec}: {desc}")
        if query:
            q = query.lower().strip()
            hit = [ln for ln in seen_lines if q in ln]
            seen_lines = hit or seen_lines
        lines += seen_lines or ["- (nothing yet)"]
        lines.append(f"not visited: {', '.join(self.not_visited()) or 'none'}")
        if self.states:
            lines.append("states: " + "; ".join(f"{o} is {s}" for o, s in self.states.items()))
        return "\n".join(lines)
