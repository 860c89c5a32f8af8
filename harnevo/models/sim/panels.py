"""Reading the workspace panels a message shows, line by line: a Belief panel (or a `track` result), a
Progress panel (or a `commit` result) and an Experience panel (or a `recall` result).

Each reader keeps every line with what it understood of it, so that what the sim took from a panel can
be compared with what the harness put in it: `unread()` lists the lines (or parts of lines) it did not
understand. The World applies these readings (world.py); nothing here changes a World."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harnevo.models.sim.text import NAME, names_in

BELIEF_KEYS = re.compile(r"^\s*(location|holding|open|seen|not visited|states)\s*:\s*(.*)$", re.I)
_RECEPTACLE_LINE = re.compile(r"^\s*[-*]?\s*(" + NAME + r")\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_STATE = re.compile(r"(" + NAME + r") is (hot|cool|cold|clean|on|off)")
_PLACEHOLDER = re.compile(r"^\s*[-*]\s*\((?:nothing|no [a-z]+) yet\)\s*$", re.I)
_DONE = re.compile(r"\[(?:done|x|✓)\]\s*(.*)$", re.I)
_TODO = re.compile(r"\[(?:todo| )\]\s*(.*)$", re.I)
_HEADER = {"progress": re.compile(r"^\s*progress\s*:?\s*$", re.I),
           "experience": re.compile(r"^\s*experience\s*:?\s*$", re.I)}
# the words a belief value may hold besides names; anything else on the line is not understood
_FILLER = {"location": r"start", "holding": r"nothing", "open": r"none", "not visited": r"none", "seen": r"(?!)"}
_CONTENTS_FILLER = r"nothing|closed|\d+ other object\(s\)"


def is_belief_block(text: str) -> bool:
    """Text laid out like a Belief panel (two or more of its keyed lines)."""
    return sum(1 for ln in text.splitlines() if BELIEF_KEYS.match(ln)) >= 2


def _rest(value: str, filler: str) -> str:
    """What is left of `value` once names, the `filler` words and separators are taken out."""
    left = re.sub(r"\b" + NAME + r"\b", " ", value)
    left = re.sub(r"\b(?:" + filler + r")(?:\s|$|(?=[,;.]))", " ", left, flags=re.I)
    return re.sub(r"(?:[\s,;.]|\band\b)+", " ", left).strip()


@dataclass(frozen=True)
class PanelLine:
    """One line of a panel and what the reader took from it.

    kind: a belief key (location, holding, open, seen, not visited, states), 'receptacle' (a seen
    line `- cabinet 1: apple 1`), 'done' / 'todo' (a subgoal), 'lesson', 'header', 'placeholder'
    (`- (nothing yet)`), 'blank', or 'unread'. `rest`: the part of the line the reader did not
    understand ('' when it understood all of it)."""

    kind: str
    text: str
    names: tuple[str, ...] = ()
    value: str = ""  # receptacle lines: the contents text, lowercased; subgoals and lessons: their text
    note: str = ""  # receptacle lines: the text in brackets after the name, e.g. "open"
    states: tuple[tuple[str, str], ...] = ()  # states lines: (object, state), 'cold' read as 'cool'
    rest: str = ""


@dataclass
class BeliefRead:
    """What one Belief panel says."""

    lines: list[PanelLine] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "BeliefRead":
        in_seen = False
        out = cls()
        for line in text.splitlines():
            m = BELIEF_KEYS.match(line)
            if m:
                key, val = m.group(1).lower(), m.group(2).strip()
                in_seen = key == "seen"
                if key == "states":
                    pairs = tuple((o, "cool" if s == "cold" else s) for o, s in _STATE.findall(val))
                    rest = re.sub(r"[\s;,.]+", " ", _STATE.sub(" ", val)).strip()
                    out.lines.append(PanelLine(key, line, states=pairs, rest=rest))
                else:
                    out.lines.append(PanelLine(key, line, tuple(names_in(val)), rest=_rest(val, _FILLER[key])))
                continue
            m = _RECEPTACLE_LINE.match(line)
            if m and (in_seen or line.lstrip().startswith(("-", "*"))):
                note, val = (m.group(2) or ""), m.group(3).strip().lower()
                rest = " ".join(x for x in (_rest(val, _CONTENTS_FILLER), _rest(note, "open|closed")) if x)
                out.lines.append(PanelLine("receptacle", line, (m.group(1),), value=val, note=note, rest=rest))
            elif _PLACEHOLDER.match(line):
                out.lines.append(PanelLine("placeholder", line))
            elif not line.strip():
                out.lines.append(PanelLine("blank", line))
            else:
                out.lines.append(PanelLine("unread", line, rest=line.strip()))
        return out

    def _last(self, kind: str) -> PanelLine | None:
        return next((ln for ln in reversed(self.lines) if ln.kind == kind), None)

    @property
    def location(self) -> str | None:
        ln = self._last("location")
        return ln.names[0] if ln and ln.names else None

    @property
    def holding(self) -> list[str]:
        ln = self._last("holding")
        return list(ln.names) if ln else []

    @property
    def open(self) -> list[str]:
        return [r for ln in self.lines if ln.kind == "open" for r in ln.names]

    @property
    def not_visited(self) -> list[str] | None:
        ln = self._last("not visited")
        return list(ln.names) if ln else None

    @property
    def seen(self) -> dict[str, list[str] | None]:
        """Receptacle -> the objects listed on it ([] for nothing or only other objects); None when the
        line says it is closed and nothing about its inside."""
        out: dict[str, list[str] | None] = {}
        for ln in self.lines:
            if ln.kind == "receptacle":
                objs = names_in(ln.value)
                closed_only = not objs and "nothing" not in ln.value and "other object" not in ln.value \
                    and "closed" in ln.value
                out[ln.names[0]] = None if closed_only else objs
        return out

    @property
    def others(self) -> dict[str, int]:
        """Receptacle -> how many objects it holds that the panel does not list ('3 other object(s)')."""
        out = {}
        for ln in self.lines:
            m = re.search(r"(\d+) other object", ln.value) if ln.kind == "receptacle" else None
            if m:
                out[ln.names[0]] = int(m.group(1))
        return out

    @property
    def states(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for ln in self.lines:
            for o, s in ln.states:
                out.setdefault(o, []).append(s)
        return out

    def unread(self) -> list[str]:
        return [ln.rest for ln in self.lines if ln.rest]


@dataclass
class ProgressRead:
    """What one Progress panel says: its subgoals, in order, done or not."""

    lines: list[PanelLine] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "ProgressRead":
        out = cls()
        for line in text.splitlines():
            m = _DONE.search(line)
            kind = "done" if m else "todo"
            m = m or _TODO.search(line)
            if m:
                before = line[:m.start()].strip(" \t-*")
                out.lines.append(PanelLine(kind, line, value=m.group(1), rest=before))
            elif _HEADER["progress"].match(line):
                out.lines.append(PanelLine("header", line))
            elif _PLACEHOLDER.match(line):
                out.lines.append(PanelLine("placeholder", line))
            elif not line.strip():
                out.lines.append(PanelLine("blank", line))
            else:
                out.lines.append(PanelLine("unread", line, rest=line.strip()))
        return out

    @property
    def subgoals(self) -> list[tuple[str, bool]]:
        return [(ln.value, ln.kind == "done") for ln in self.lines if ln.kind in ("done", "todo")]

    def unread(self) -> list[str]:
        return [ln.rest for ln in self.lines if ln.rest]


@dataclass
class ExperienceRead:
    """What one Experience panel says: its lessons. A `recall` result (`header`) starts with a title line."""

    lines: list[PanelLine] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str, *, header: bool = False) -> "ExperienceRead":
        out = cls()
        for i, line in enumerate(text.splitlines()):
            if header and i == 0:
                ok = _HEADER["experience"].match(line)
                out.lines.append(PanelLine("header" if ok else "unread", line, rest="" if ok else line.strip()))
            elif _PLACEHOLDER.match(line):
                out.lines.append(PanelLine("placeholder", line))
            elif line.strip(" -*"):
                out.lines.append(PanelLine("lesson", line, value=line.strip(" -*")))
            else:
                out.lines.append(PanelLine("blank", line))
        return out

    @property
    def lessons(self) -> list[str]:
        return [ln.value for ln in self.lines if ln.kind == "lesson"]

    def unread(self) -> list[str]:
        return [ln.rest for ln in self.lines if ln.rest]


Panel = BeliefRead | ProgressRead | ExperienceRead
