"""Reading one call's messages: sections (by their headers), history entries (`> command` then what the
game said), the admissible list, the panels and the current observation, into a `View`: the goal, the
rebuilt World, what is offered and what the text leaves out."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from harnevo.models.base import Message
from harnevo.models.sim.goal import SimGoal, read_goal
from harnevo.models.sim.panels import Panel, is_belief_block
from harnevo.models.sim.text import META, NAME
from harnevo.models.sim.world import World

_HEADER = re.compile(r"^\s{0,3}#{1,4}\s*(.+?)\s*#*\s*$")
_SECTION_KEYS = (
    ("admissible", ("admissible", "available action", "valid action", "possible action")),
    ("history", ("history", "trajectory", "previous", "recent steps", "so far")),
    ("belief", ("belief", "world state", "what you know")),
    ("progress", ("progress", "subgoal")),
    ("experience", ("experience", "lesson")),
    ("observation", ("observation", "current", "feedback")),
    ("task", ("task", "goal")),
    ("room", ("room", "environment", "initial")),
)
_CMD_LINE = re.compile(r"^\s*(?:\d+\s*[.:)]\s*)?(?:step\s*\d+\s*[:.)-]?\s*)?(?:>|(?:action|act)\s*:)\s*(.*)$",
                       re.I)
_OBS_LINE = re.compile(r"^\s*(?:observation|obs)\s*:\s*(.*)$", re.I)


def _section_key(header: str) -> str:
    h = header.lower()
    for key, words in _SECTION_KEYS:
        if any(w in h for w in words):
            return key
    return "other"


def split_sections(text: str) -> list[tuple[str, str, str]]:
    """[(key, header, body)] in order; text before the first header is ('preamble', '', body)."""
    out: list[tuple[str, str, list[str]]] = [("preamble", "", [])]
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            out.append((_section_key(m.group(1)), m.group(1), []))
        else:
            out[-1][2].append(line)
    return [(k, h, "\n".join(b).strip()) for k, h, b in out if h or "\n".join(b).strip()]


def parse_entries(text: str, *, offsets: bool = False) -> list:
    """History-like text -> [(command or None, observation)] (with `offsets`, a third item: the
    entry's character offset in `text`). Lines before the first command are an entry with command None."""
    entries: list[tuple[str | None, list[str], int]] = [(None, [], 0)]
    pos = 0
    for line in text.split("\n"):
        m = _CMD_LINE.match(line)
        if m and m.group(1).strip():
            entries.append((m.group(1).strip(), [], pos))
        else:
            m = _OBS_LINE.match(line)
            entries[-1][1].append(m.group(1) if m else line)
        pos += len(line) + 1
    out = [(c, "\n".join(o).strip(), at) for c, o, at in entries if c is not None or "\n".join(o).strip()]
    return out if offsets else [(c, o) for c, o, _ in out]


def parse_admissible(text: str) -> list[str]:
    text = text.strip().strip("[]")
    out = []
    for part in re.split(r"\s*\|\s*|\n|,\s*(?=['\"]?[a-z])", text):
        part = re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", part).strip().strip("'\"`").strip()
        if part and re.match(r"^[a-z]", part) and part not in out:
            out.append(part)
    return out


@dataclass
class View:
    """Everything one call's messages show."""

    system: str
    user: str
    full: str
    goal: SimGoal | None
    world: World
    admissible: list[str] | None
    offered: set[str]
    has_belief: bool
    has_experience: bool
    history_seen: bool
    truncated: bool
    at_start: bool
    track_visible: bool
    panels: list[Panel]  # every panel read (sections, meta-action results), in reading order

    def last_panel(self, kind: type) -> Panel | None:
        """The last panel of a kind (BeliefRead, ProgressRead, ExperienceRead) that was read, or None."""
        return next((p for p in reversed(self.panels) if isinstance(p, kind)), None)


def read_messages(messages: list[Message], *, forget_per_1k: float = 0.0,
                  rng: random.Random | None = None) -> View:
    """What the messages show. With `forget_per_1k` > 0 (and an `rng`), each history entry and each line
    of a Belief panel is overlooked with probability min(0.95, forget_per_1k * tokens after it / 1000):
    facts far from the end of a long prompt get lost, as in real long-context models."""
    system = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
    full = "\n".join(m.get("content") or "" for m in messages)
    convo = [m for m in messages if m.get("role") != "system"]
    user = convo[-1].get("content") or "" if convo else ""
    w = World()
    # earlier turns of a multi-turn chat become history entries: assistant action, then the next user text
    prior: list[tuple[str | None, str]] = []
    for i, m in enumerate(convo[:-1]):
        if m.get("role") == "assistant":
            acts = re.findall(r"^\s*(?:action|act)\s*:\s*(.+)$", m.get("content") or "", re.I | re.M)
            nxt = convo[i + 1].get("content") or "" if i + 1 < len(convo) else ""
            prior.append((acts[-1].strip() if acts else (m.get("content") or "").strip(), _current_obs(nxt)))
        elif i == 0:
            prior.append((None, m.get("content") or ""))
    sections = split_sections(user)

    def overlooked(body: str, offset: int) -> bool:
        if forget_per_1k <= 0 or rng is None:
            return False
        start = user.find(body)
        after = len(user) - (start if start >= 0 else 0) - offset
        return rng.random() < min(0.95, forget_per_1k * (after / 4.0) / 1000.0)

    by = {}
    for k, h, b in sections:
        by.setdefault(k, []).append((h, b))
    goal = read_goal(user) or read_goal(full)
    offered = {a for a in META if re.search(r"(?im)^\W*" + a + r"\b|\b" + a + r"\s*[\[<(]", system)}
    admissible = None
    for _, b in by.get("admissible", []):
        admissible = parse_admissible(b)
    # 1. the room and anything before the first header
    for k in ("room", "task", "preamble"):
        for _, b in by.get(k, []):
            w.read_text(b) if not re.search(r"(?m)^\s*>", b) else None
    for cmd, obs in prior:
        w.read_entry(cmd, obs)
    # 2. progress (what was done, oldest information), experience lessons
    for _, b in by.get("progress", []):
        w.read_progress(b)
    for _, b in by.get("experience", []):
        w.read_lessons(b)
    # 3. history, in order (also a preamble or unknown section that holds '> cmd' lines)
    hist_text = [b for k in ("preamble", "other", "history") for _, b in by.get(k, [])
                 if k == "history" or re.search(r"(?m)^\s*>", b)]
    n_entries, track_visible = 0, False
    for b in hist_text:
        for cmd, obs, at in parse_entries(b, offsets=True):
            if cmd is not None:
                n_entries += 1
            if overlooked(b, at):
                continue
            if cmd is not None:
                track_visible |= cmd.lower().startswith("track")
            w.read_entry(cmd, obs)
    w.entries = n_entries
    # 4. the belief panel (a snapshot of now), other sections
    for _, b in by.get("belief", []):
        if forget_per_1k > 0:
            lines, pos = [], 0
            for ln in b.split("\n"):
                if not (ln.lstrip().startswith(("-", "*")) and overlooked(b, pos)):
                    lines.append(ln)
                pos += len(ln) + 1
            b = "\n".join(lines)
        w.read_belief(b)
    for _, b in by.get("other", []):
        if is_belief_block(b):
            w.read_belief(b)
    # 5. the current observation
    at_start = False
    for _, b in by.get("observation", []):
        ents = parse_entries(b)
        for cmd, obs in ents:
            if cmd is not None:
                track_visible |= cmd.lower().startswith("track")
            w.read_entry(cmd, obs)
        last = ents[-1] if ents else (None, "")
        at_start = last[0] is None and "Looking quickly around you" in last[1]
    if not by.get("observation") and not n_entries:
        at_start = "Looking quickly around you" in user and not prior
    # 6. the admissible list says where we are and what we hold
    if admissible:
        _read_admissible(w, admissible)
    # is the history window hiding steps?
    steps_taken = None
    m = re.search(r"\bstep\s+(\d+)\s*(?:/|of|out of)\s*(\d+)", user, re.I)
    if m:
        steps_taken = int(m.group(1)) - 1
    m2 = re.search(r"\bsteps?\s*(?:taken|used|so far)\s*[:=]?\s*(\d+)", user, re.I)
    if m2:
        steps_taken = int(m2.group(1))
    has_hist_section = "history" in by
    if steps_taken is not None:
        truncated = steps_taken > n_entries + 1
    elif re.search(r"omitted|truncated|earlier steps", user, re.I):
        truncated = True
    else:
        win = None
        for h, _ in by.get("history", []):
            mm = re.search(r"last\s+(\d+)", h, re.I)
            win = int(mm.group(1)) if mm else win
        truncated = (win is not None and n_entries >= win > 0) or (not has_hist_section and not at_start
                                                                     and not prior)
    has_belief = any(b.strip() for _, b in by.get("belief", []))
    has_exp = any(b.strip() for _, b in by.get("experience", []))
    return View(system=system, user=user, full=full, goal=goal, world=w, admissible=admissible,
                offered=offered, has_belief=has_belief, has_experience=has_exp,
                history_seen=has_hist_section or bool(prior), truncated=truncated, at_start=at_start,
                track_visible=track_visible, panels=w.panels)


def _current_obs(text: str) -> str:
    for k, _, b in split_sections(text):
        if k == "observation":
            return b
    return text


def _read_admissible(w: World, adm: list[str]) -> None:
    here = None
    for a in adm:
        m = re.match(r"(?:take (" + NAME + r") from|examine|close|open) (" + NAME + r")$", a)
        if m and (a.startswith("take") or a.startswith("examine") or a.startswith("close")):
            here = m.group(2)
        m = re.match(r"(?:move|heat|cool|clean) (" + NAME + r") (?:to|with) (" + NAME + r")$", a)
        if m:  # only what one holds can be put down, heated, cooled or cleaned
            here = m.group(2)
            w.holding, w.holding_known, w.suspect_holding = m.group(1), True, False
    gotos = {a[6:] for a in adm if a.startswith("go to ")}
    if gotos and w.receptacles:
        missing = [r for r in w.receptacles if r not in gotos]
        if len(missing) == 1:
            here = missing[0]
    if here:
        w.location = here
    if here and not any(a.startswith("move ") for a in adm):
        # nothing can be put down here: hands are empty (or the receptacle is closed)
        if not any(a == f"open {here}" for a in adm) and w.holding_known is False:
            w.holding = None
    for a in adm:
        m = re.match(r"take (" + NAME + r") from (" + NAME + r")$", a)
        if m and m.group(1) != w.holding:
            w.where[m.group(1)] = m.group(2)
        m = re.match(r"open (" + NAME + r")$", a)
        if m:
            w.closed[m.group(1)] = True
        m = re.match(r"close (" + NAME + r")$", a)
        if m:
            w.closed[m.group(1)] = False
