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
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from harnevo.errors import ModelNotFoundError
from harnevo.models.base import Message, Reply, Usage, approx_tokens

# ------------------------------------------------------------------------------------------------------
# Knowledge a model would bring: typical places of object types (a small prior, best first), appliances.
# ------------------------------------------------------------------------------------------------------
_KITCHEN_FOOD = ("fridge", "countertop", "diningtable", "microwave", "garbagecan", "sinkbasin")
_UTENSIL = ("countertop", "diningtable", "drawer", "sinkbasin")
_DISH = ("cabinet", "countertop", "diningtable", "fridge", "sinkbasin", "microwave", "shelf")
_DESK_THING = ("desk", "sidetable", "dresser", "drawer", "shelf", "bed", "coffeetable")
PRIORS: dict[str, tuple[str, ...]] = {
    "apple": _KITCHEN_FOOD, "tomato": _KITCHEN_FOOD, "potato": _KITCHEN_FOOD, "egg": _KITCHEN_FOOD,
    "lettuce": ("countertop", "diningtable", "fridge", "sinkbasin"),
    "bread": ("countertop", "diningtable", "fridge"),
    "butterknife": _UTENSIL, "knife": _UTENSIL, "fork": _UTENSIL, "spoon": _UTENSIL, "spatula": _UTENSIL,
    "ladle": ("countertop", "drawer", "cabinet", "diningtable"),
    "mug": ("coffeemachine", "countertop", "cabinet", "fridge", "diningtable", "sinkbasin", "microwave",
            "shelf"),
    "cup": _DISH, "bowl": _DISH, "plate": ("cabinet", "countertop", "diningtable", "fridge", "shelf"),
    "pan": ("stoveburner", "countertop", "cabinet", "diningtable"),
    "pot": ("stoveburner", "countertop", "cabinet", "fridge", "diningtable"),
    "kettle": ("stoveburner", "countertop", "cabinet"),
    "dishsponge": ("countertop", "cabinet", "diningtable", "drawer", "sinkbasin"),
    "peppershaker": ("cabinet", "countertop", "diningtable", "drawer", "shelf"),
    "saltshaker": ("cabinet", "countertop", "diningtable", "drawer", "shelf"),
    "winebottle": ("cabinet", "countertop", "diningtable", "fridge", "shelf"),
    "glassbottle": ("countertop", "diningtable", "cabinet", "fridge"),
    "soapbottle": ("countertop", "cabinet", "toilet", "shelf", "garbagecan", "diningtable"),
    "soapbar": ("countertop", "toilet", "sinkbasin", "bathtubbasin", "cabinet", "shelf"),
    "spraybottle": ("toilet", "countertop", "cabinet", "garbagecan", "shelf"),
    "toiletpaper": ("toiletpaperhanger", "toilet", "cabinet", "countertop", "shelf", "drawer"),
    "cloth": ("cabinet", "bathtubbasin", "countertop", "drawer", "shelf", "sinkbasin"),
    "candle": ("toilet", "countertop", "cabinet", "shelf", "sidetable", "drawer"),
    "handtowel": ("handtowelholder", "countertop"), "towel": ("towelholder", "countertop"),
    "tissuebox": ("sidetable", "coffeetable", "diningtable", "shelf", "dresser", "countertop"),
    "alarmclock": ("desk", "sidetable", "shelf", "dresser", "diningtable"),
    "book": ("bed", "desk", "sidetable", "shelf", "dresser", "drawer", "coffeetable"),
    "cd": ("desk", "drawer", "dresser", "sidetable", "shelf", "garbagecan"),
    "cellphone": ("bed", "desk", "dresser", "sidetable", "drawer", "shelf"),
    "creditcard": ("desk", "sidetable", "dresser", "shelf", "coffeetable", "armchair", "drawer"),
    "keychain": ("sidetable", "dresser", "desk", "armchair", "shelf", "drawer", "coffeetable"),
    "pen": _DESK_THING, "pencil": _DESK_THING,
    "laptop": ("bed", "desk", "sofa", "diningtable", "sidetable", "armchair"),
    "pillow": ("bed", "sofa", "armchair"),
    "remotecontrol": ("sofa", "coffeetable", "armchair", "sidetable", "tvstand", "drawer"),
    "newspaper": ("sofa", "coffeetable", "armchair", "diningtable", "sidetable", "shelf"),
    "box": ("coffeetable", "diningtable", "sofa", "dresser", "sidetable", "shelf"),
    "statue": ("shelf", "coffeetable", "sidetable", "dresser", "countertop", "diningtable"),
    "vase": ("shelf", "countertop", "cabinet", "sidetable", "diningtable", "dresser"),
    "watch": ("coffeetable", "sidetable", "dresser", "tvstand", "shelf", "drawer"),
    "desklamp": ("desk", "sidetable", "dresser", "nightstand", "shelf", "coffeetable"),
    "floorlamp": ("sidetable", "desk", "dresser"),
}
_GENERIC = ("countertop", "diningtable", "desk", "sidetable", "shelf", "dresser", "coffeetable", "cabinet",
            "drawer")
_SURFACES = ("diningtable", "countertop", "coffeetable", "desk", "sidetable", "dresser")
OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe", "box"})
APPLIANCE = {"heat": "microwave", "cool": "fridge", "clean": "sinkbasin"}
STATE_OF = {"heat": "hot", "cool": "cool", "clean": "clean"}
LAMPS = ("desklamp", "floorlamp")
META = ("track", "commit", "recall", "note")

NAME = r"[a-z]+ \d+"
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


def _type(name: str) -> str:
    return name.rsplit(" ", 1)[0] if name else ""


def _names(text: str) -> list[str]:
    return re.findall(r"\b" + NAME + r"\b", text or "")


@dataclass(frozen=True)
class Goal:
    family: str  # pick | look | clean | heat | cool | pick2
    obj: str  # object type, e.g. "apple"
    target: str  # receptacle type; the lamp type for look
    text: str = ""


def parse_goal(text: str) -> Goal | None:
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
                return Goal(_ADJ_FAMILY[g.group(1)], g.group(2), g.group(3), cand.strip())
            if fam == "verb":
                return Goal(g.group(1), g.group(2), g.group(3), cand.strip())
            return Goal(fam, g.group(1), g.group(2), cand.strip())
    return None


# ------------------------------------------------------------------------------------------------------
# Reading the messages: sections, history entries, engine sentences, belief blocks.
# ------------------------------------------------------------------------------------------------------
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
_BELIEF_KEYS = re.compile(r"^\s*(location|holding|open|seen|not visited|states)\s*:\s*(.*)$", re.I)


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


def is_belief_block(text: str) -> bool:
    return sum(1 for ln in text.splitlines() if _BELIEF_KEYS.match(ln)) >= 2


def parse_admissible(text: str) -> list[str]:
    text = text.strip().strip("[]")
    out = []
    for part in re.split(r"\s*\|\s*|\n|,\s*(?=['\"]?[a-z])", text):
        part = re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", part).strip().strip("'\"`").strip()
        if part and re.match(r"^[a-z]", part) and part not in out:
            out.append(part)
    return out


@dataclass
class World:
    """What the visible text says about the world, later text overriding earlier."""

    receptacles: list[str] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)  # object -> receptacle
    searched: set[str] = field(default_factory=set)  # contents seen
    maybe_searched: set[str] = field(default_factory=set)  # a panel says visited, contents not shown
    closed: dict[str, bool] = field(default_factory=dict)
    location: str | None = None
    holding: str | None = None
    holding_known: bool = False
    suspect_holding: bool = False  # a take failed and we do not know what we hold
    states: dict[str, set[str]] = field(default_factory=dict)
    lessons: list[str] = field(default_factory=list)
    last_cmd: str | None = None
    last_obs: str = ""
    last_failed: bool = False
    entries: int = 0  # visible history entries

    # --- low-level facts ---
    def add_receptacle(self, r: str) -> None:
        if r not in self.receptacles:
            self.receptacles.append(r)

    def set_contents(self, r: str, objs: list[str], *, partial: bool = False) -> None:
        if not partial:
            for o in [o for o, w in self.where.items() if w == r and o not in objs]:
                del self.where[o]
        for o in objs:
            self.where[o] = r
            if self.holding == o:
                self.holding = None
        self.searched.add(r)
        self.maybe_searched.discard(r)

    def pick(self, o: str, r: str | None) -> None:
        self.where.pop(o, None)
        self.holding, self.holding_known, self.suspect_holding = o, True, False
        if r:
            self.location = r

    def put(self, o: str, r: str) -> None:
        self.where[o] = r
        if self.holding == o or not self.holding_known:
            self.holding = None
        self.holding_known = True
        self.location = r

    def state(self, o: str, s: str) -> None:
        st = self.states.setdefault(o, set())
        if s in ("hot", "cool"):
            st.discard("cool" if s == "hot" else "hot")
        if s == "off":
            st.discard("on")
        st.add(s)

    def contents(self, r: str) -> list[str]:
        return [o for o, w in self.where.items() if w == r]

    # --- engine sentences ---
    _PATTERNS = [
        ("room", re.compile(r"Looking quickly around you, you see ([^.]*)\.")),
        ("arrive", re.compile(r"You arrive at (?:loc \d+\. )?(?:the )?(" + NAME + r")\b")),
        ("on", re.compile(r"On the (" + NAME + r"), you see ([^.]*)\.")),
        ("in", re.compile(r"The (" + NAME + r") is open\. In it, you see ([^.]*)\.")),
        ("closed", re.compile(r"The (" + NAME + r") is closed\.")),
        ("open", re.compile(r"You open the (" + NAME + r")\.")),
        ("close", re.compile(r"You close the (" + NAME + r")\.")),
        ("pick", re.compile(r"You pick up the (" + NAME + r")(?: from the (" + NAME + r"))?\.")),
        ("put", re.compile(r"You (?:move|put) the (" + NAME + r") (?:to|in|on|into|onto|in/on) the (" + NAME
                           + r")\.")),
        ("trans", re.compile(r"You (heat|cool|clean) the (" + NAME + r") using the (" + NAME + r")\.")),
        ("toggle", re.compile(r"You turn (on|off) the (" + NAME + r")\.")),
        ("carry", re.compile(r"You are carrying:? ([^.]*)\.")),
        ("empty", re.compile(r"You are not carrying anything\.")),
        ("exam", re.compile(r"This is a ((?:hot|cool|cold|clean)(?: and (?:hot|cool|cold|clean))*) "
                            r"(?:sliced )?(" + NAME + r")")),
        ("nothing", re.compile(r"Nothing happens\.")),
    ]

    def read_text(self, text: str) -> bool:
        """Apply the engine sentences of `text` in order. Returns False when it says 'Nothing happens.'"""
        hits = []
        for kind, pat in self._PATTERNS:
            for m in pat.finditer(text or ""):
                hits.append((m.start(), kind, m))
        hits.sort(key=lambda h: h[0])
        ok = True
        for _, kind, m in hits:
            if kind == "room":
                for r in _names(m.group(1)):
                    self.add_receptacle(r)
            elif kind == "arrive":
                self.location = m.group(1)
                self.add_receptacle(m.group(1))
            elif kind in ("on", "in"):
                self.add_receptacle(m.group(1))
                self.set_contents(m.group(1), _names(m.group(2)))
                if kind == "in":
                    self.closed[m.group(1)] = False
            elif kind == "closed":
                self.closed[m.group(1)] = True
            elif kind == "open":
                self.closed[m.group(1)] = False
                self.location = m.group(1)
            elif kind == "close":
                self.closed[m.group(1)] = True
            elif kind == "pick":
                self.pick(m.group(1), m.group(2))
            elif kind == "put":
                self.put(m.group(1), m.group(2))
            elif kind == "trans":
                self.state(m.group(2), STATE_OF[m.group(1)])
                self.location = m.group(3)
            elif kind == "toggle":
                self.state(m.group(2), m.group(1))
            elif kind == "carry":
                objs = _names(m.group(1))
                self.holding = objs[0] if objs else None
                self.holding_known, self.suspect_holding = True, False
            elif kind == "empty":
                self.holding, self.holding_known, self.suspect_holding = None, True, False
            elif kind == "exam":
                for w in re.findall(r"hot|cool|cold|clean", m.group(1)):
                    self.state(m.group(2), "cool" if w == "cold" else w)
            elif kind == "nothing":
                ok = False
        return ok

    def read_entry(self, cmd: str | None, obs: str) -> None:
        head = (cmd or "").split(" ", 1)[0].lower()
        if head in META:
            if head == "track" or is_belief_block(obs):
                self.read_belief(obs)
            elif head == "recall":
                self.lessons += [ln.strip(" -*") for ln in obs.splitlines()[1:] if ln.strip(" -*")]
            elif head == "commit":
                self.read_progress(obs)
        elif is_belief_block(obs):
            self.read_belief(obs)
        else:
            ok = self.read_text(obs)
            if cmd is not None:
                self.last_failed = not ok
                if not ok:
                    self._learn_failure(cmd)
        if cmd is not None:
            self.last_cmd, self.last_obs = cmd.strip().lower(), obs

    def _learn_failure(self, cmd: str) -> None:
        m = re.match(r"take (" + NAME + r") from (" + NAME + r")$", cmd.strip().lower())
        if m:
            if self.where.get(m.group(1)) == m.group(2):
                del self.where[m.group(1)]
            if not self.holding_known or self.holding is None:
                self.suspect_holding = True
        m = re.match(r"go to (" + NAME + r")$", cmd.strip().lower())
        if m and m.group(1) in self.receptacles:
            self.location = m.group(1)  # going where one already is does nothing
        m = re.match(r"open (" + NAME + r")$", cmd.strip().lower())
        if m and self.location == m.group(1):
            self.closed[m.group(1)] = False

    # --- panels ---
    def read_belief(self, text: str) -> None:
        in_seen = False
        not_visited: list[str] | None = None
        seen_here: set[str] = set()
        for line in text.splitlines():
            m = _BELIEF_KEYS.match(line)
            if m:
                key, val = m.group(1).lower(), m.group(2).strip()
                in_seen = key == "seen"
                if key == "location":
                    names = _names(val)
                    self.location = names[0] if names else None
                elif key == "holding":
                    names = _names(val)
                    self.holding = names[0] if names else None
                    self.holding_known, self.suspect_holding = True, False
                elif key == "open":
                    for r in _names(val):
                        self.closed[r] = False
                elif key == "not visited":
                    not_visited = _names(val)
                elif key == "states":
                    for o, s in re.findall(r"(" + NAME + r") is (hot|cool|cold|clean|on|off)", val):
                        self.state(o, "cool" if s == "cold" else s)
                continue
            m = re.match(r"^\s*[-*]?\s*(" + NAME + r")\s*(?:\(([^)]*)\))?\s*:\s*(.*)$", line)
            if m and (in_seen or line.lstrip().startswith(("-", "*"))):
                r, note, val = m.group(1), (m.group(2) or ""), m.group(3).strip().lower()
                self.add_receptacle(r)
                seen_here.add(r)
                objs = _names(val)
                if objs or "nothing" in val or "other object" in val:
                    self.set_contents(r, objs)
                elif "closed" in val:
                    self.closed[r] = True
                    self.searched.discard(r)
                if "open" in note:
                    self.closed[r] = False
                if "closed" in note:
                    self.closed[r] = True
        if not_visited is not None:
            for r in not_visited:
                self.add_receptacle(r)
                self.searched.discard(r)
                self.maybe_searched.discard(r)
            for r in self.receptacles:
                if r not in not_visited and r not in self.searched and r not in seen_here:
                    self.maybe_searched.add(r)

    def read_progress(self, text: str) -> None:
        for line in text.splitlines():
            m = re.search(r"\[(?:done|x|✓)\]\s*(.*)$", line, re.I)
            if not m:
                continue
            t = m.group(1).lower()
            p = re.search(r"(?:placed|put|moved|move) (" + NAME + r") (?:in|on|to|into) (" + NAME + r")", t)
            if p:
                self.where[p.group(1)] = p.group(2)
            s = re.search(r"(heated|cooled|cleaned|heat|cool|clean) (" + NAME + r")", t)
            if s:
                self.state(s.group(2), {"he": "hot", "co": "cool", "cl": "clean"}[s.group(1)[:2]])


@dataclass
class View:
    """Everything one call's messages show."""

    system: str
    user: str
    full: str
    goal: Goal | None
    world: World
    admissible: list[str] | None
    offered: set[str]
    has_belief: bool
    has_experience: bool
    history_seen: bool
    truncated: bool
    at_start: bool
    track_visible: bool


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
    goal = parse_goal(user) or parse_goal(full)
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
        w.lessons += [ln.strip(" -*") for ln in b.splitlines() if ln.strip(" -*")]
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
                track_visible=track_visible)


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


# ------------------------------------------------------------------------------------------------------
# Planning
# ------------------------------------------------------------------------------------------------------
@dataclass
class Step:
    action: str
    think: str
    intent: str = "act"  # act | search | meta


class Planner:
    def __init__(self, view: View, rng: random.Random, knowledge: float = 1.0):
        self.v, self.w, self.g, self.rng = view, view.world, view.goal, rng
        self.knowledge = knowledge  # 1: the full prior of where objects usually are; 0: none

    # --- helpers ---
    def instances(self, rtype: str) -> list[str]:
        return [r for r in self.w.receptacles if _type(r) == rtype]

    def goto_then(self, r: str, action: str, why: str) -> Step:
        if self.w.location != r:
            return Step(f"go to {r}", f"{why}; I go to {r}.")
        if self.w.closed.get(r) and (action.startswith(("take", "move")) or action == "search"):
            return Step(f"open {r}", f"The {r} is closed; I open it.")
        return Step(action, why + ".")

    def prior(self, what: str, rtype: str) -> float:
        table = PRIORS.get(what, _GENERIC)
        score = 0.3
        if rtype in table:
            score = 4.0 + 6.0 * (len(table) - table.index(rtype)) / len(table)
        elif rtype in _SURFACES:
            score = 2.5  # big open surfaces hold a bit of everything
        elif rtype in _GENERIC:
            score = 1.0
        if self.g is not None and self.g.family == "pick" and rtype == self.g.target and what == self.g.obj:
            score *= 0.3  # the task would be done already if it were there
        if self.knowledge < 1.0:
            # a bounded model knows typical places only partly: the rest of its ranking is a fixed hunch,
            # the same for the same goal sentence (deterministic, from the text it reads)
            h = hashlib.sha256(f"{self.g.text if self.g else ''}|{what}|{rtype}".encode()).digest()
            hunch = int.from_bytes(h[:4], "big") / 2**32 * 10.0
            score = self.knowledge * score + (1.0 - self.knowledge) * hunch
        for lesson in self.w.lessons:
            low = lesson.lower()
            if re.search(r"\b" + what + r"\b", low) and re.search(r"\b" + rtype + r"\b", low):
                score += 12.0
        return score

    def search(self, what: str, why: str) -> Step:
        w = self.w
        loc = w.location
        if loc and loc not in w.searched and w.closed.get(loc):
            return Step(f"open {loc}", f"{why}; the {loc} is closed, I open it to look inside.", "search")
        counts: dict[str, int] = {}
        for r in w.receptacles:
            counts[_type(r)] = counts.get(_type(r), 0) + 1
        pool = [r for r in w.receptacles if r not in w.searched and r not in w.maybe_searched and r != loc]
        if not pool:
            pool = [r for r in w.receptacles if r not in w.searched and r != loc]
        if not pool:
            pool = [r for r in w.receptacles if r != loc]
            if not pool:
                return Step("look", f"{why}; I look around.", "search")
            r = self.rng.choice(pool)
            return Step(f"go to {r}", f"{why}; I have looked everywhere, I check {r} again.", "search")

        def score(r: str) -> float:
            t = _type(r)
            s = self.prior(what, t) / counts[t] ** 0.6
            if t in OPENABLE and w.closed.get(r, True):
                s /= 1.6
            return s + self.rng.random() * 0.5

        best = max(pool, key=score)
        return Step(f"go to {best}", f"{why}; {best} is a likely place I have not checked.", "search")

    def appliance(self, family: str) -> str | None:
        inst = self.instances(APPLIANCE[family])
        return inst[0] if inst else None

    # --- the plan ---
    def plan(self) -> Step:
        g, w = self.g, self.w
        if g is None:
            return Step("look", "I do not know the task; I look around.")
        if w.suspect_holding:
            return Step("inventory", "Taking failed; I check what I am carrying.")
        X = g.obj
        held = w.holding
        if held and _type(held) == X:
            if g.family in APPLIANCE and STATE_OF[g.family] not in w.states.get(held, set()):
                app = self.appliance(g.family)
                if app:
                    verb = g.family
                    return self.goto_then(app, f"{verb} {held} with {app}",
                                          f"The {held} must be {STATE_OF[g.family]}")
            if g.family == "look":
                lamps = [o for o, r in w.where.items() if _type(o) in LAMPS]
                lamps.sort(key=lambda o: (_type(o) != g.target, o))
                if lamps:
                    lamp = lamps[0]
                    return self.goto_then(w.where[lamp], f"use {lamp}",
                                          f"I hold the {held}; I turn on the {lamp}")
                return self.search(g.target, f"I hold the {held} and need a {g.target}")
            dest = self.destination()
            if dest is None:
                return self.search(g.target, f"I hold the {held} but have not found a {g.target}")
            return self.goto_then(dest, f"move {held} to {dest}", f"I put the {held} in/on the {dest}")
        if held:
            if w.location and w.location in w.receptacles:
                return self.goto_then(w.location, f"move {held} to {w.location}",
                                      f"I do not need the {held}; I put it down")
            r = next((r for r in w.receptacles if not w.closed.get(r)), w.receptacles[0] if w.receptacles
                     else None)
            if r:
                return Step(f"go to {r}", f"I do not need the {held}; I go to {r} to put it down.")
            return Step("look", "I look around.")
        # hands empty: take a goal object whose place is known
        dest = self.destination() if g.family == "pick2" else None
        cands = [o for o, r in w.where.items() if _type(o) == X and not (dest and r == dest)]
        if cands:
            cands.sort(key=lambda o: (w.where[o] != w.location, w.receptacles.index(w.where[o])
                                      if w.where[o] in w.receptacles else 99, o))
            o = cands[0]
            return self.goto_then(w.where[o], f"take {o} from {w.where[o]}", f"The {o} is at {w.where[o]}")
        return self.search(X, f"I need to find a {X}")

    def destination(self) -> str | None:
        g, w = self.g, self.w
        targets = self.instances(g.target)
        if not targets:
            return None

        def key(r: str):
            n = sum(1 for o, rr in w.where.items() if rr == r and _type(o) == g.obj)
            return (-n if g.family == "pick2" else 0, r != w.location, bool(w.closed.get(r, _type(r) in OPENABLE)),
                    w.receptacles.index(r))

        return min(targets, key=key)


def _meta_step(view: View, step: Step) -> Step | None:
    """A meta-action, when the system message offers them and one would help now."""
    g, w, off = view.goal, view.world, view.offered
    if not off or g is None:
        return None
    if "recall" in off and view.at_start and not view.has_experience:
        return Step(f"recall {g.obj}", f"Lessons about where a {g.obj} is might help.", "meta")
    last = w.last_cmd or ""
    took = re.match(r"take (" + NAME + r") from (" + NAME + r")$", last)
    if took and not w.last_failed and _type(took.group(1)) == g.obj and w.holding == took.group(1):
        rtype = _type(took.group(2))
        if ("note" in off and len(w.searched) >= 5
                and not any(g.obj in l and rtype in l for l in w.lessons)):
            return Step(f"note {g.obj} can be found in {rtype}", f"I found the {g.obj} after a long search.",
                        "meta")
        if "commit" in off and g.family != "pick2":
            return Step(f"commit took {took.group(1)}", "I record the subgoal I just finished.", "meta")
    moved = re.match(r"move (" + NAME + r") to (" + NAME + r")$", last)
    if moved and not w.last_failed and g.family == "pick2" and "commit" in off \
            and _type(moved.group(1)) == g.obj and _type(moved.group(2)) == g.target:
        return Step(f"commit placed {moved.group(1)} in {moved.group(2)}", "One of the two is in place.", "meta")
    if "track" in off and not view.has_belief and view.truncated and not view.track_visible:
        if step.intent == "search" or not w.holding_known:
            q = g.obj if not (g.family == "look" and w.holding and _type(w.holding) == g.obj) else g.target
            return Step(f"track {q}", "My history no longer shows where I have looked; I check my belief.",
                        "meta")
    return None


# ------------------------------------------------------------------------------------------------------
# Lapses
# ------------------------------------------------------------------------------------------------------
def _lapse(view: View, planned: str, rng: random.Random) -> tuple[str | None, str]:
    """A wrong or malformed action: (action or None for chatter, thought)."""
    adm = [a for a in (view.admissible or []) if a != planned]
    w = view.world
    if adm and rng.random() < 0.5:
        return rng.choice(adm), "I think this will help."
    kind = rng.randrange(5)
    names = _names(planned)
    if kind == 0 and names:  # a non-existent number
        n = names[-1]
        return planned.replace(n, f"{_type(n)} {rng.randint(20, 40)}"), "I go on."
    if kind == 1:  # the old syntax
        o = w.holding or (names[0] if names else (view.goal.obj if view.goal else "object"))
        r = names[-1] if names and names[-1] != o else (view.goal.target if view.goal else "table")
        return f"put {o} in {r}", "I put it there."
    if kind == 2 and names:  # a missing id
        return re.sub(r" \d+\b", "", planned), "I go on."
    if kind == 3:
        return None, "I am not sure what to do next; let me think about where things might be."
    others = [r for r in w.receptacles if r != w.location]
    if others:
        return f"go to {rng.choice(others)}", "Maybe it is over there."
    return "look", "I look around."


# ------------------------------------------------------------------------------------------------------
# The models
# ------------------------------------------------------------------------------------------------------
def _rng(seed: int, sample: int, messages: list[Message]) -> random.Random:
    h = hashlib.sha256()
    h.update(f"{seed}\x00{sample}\x00".encode())
    for m in messages:
        h.update(f"{m.get('role', '')}\x00{m.get('content') or ''}\x01".encode())
    return random.Random(int.from_bytes(h.digest()[:8], "big"))


def prompt_tokens(messages: list[Message]) -> int:
    return sum(approx_tokens(m.get("content") or "") for m in messages)


@dataclass
class Decision:
    text: str  # the reply
    action: str | None  # the command in it (None: chatter)
    planned: str  # what it meant to do without a lapse
    lapsed: bool
    p_lapse: float


class _SimBase:
    simulated = True

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.seed = seed

    def decide(self, messages: list[Message], sample: int = 0) -> Decision:  # pragma: no cover - abstract
        raise NotImplementedError

    async def complete(self, messages: list[Message], *, temperature: float = 0.0, max_tokens: int = 256,
                       sample: int = 0) -> Reply:
        t0 = time.perf_counter()
        d = self.decide(messages, sample)
        await self._wait()
        usage = Usage(prompt_tokens=prompt_tokens(messages), completion_tokens=approx_tokens(d.text), cost_usd=0.0)
        return Reply(text=d.text, usage=usage, latency_s=time.perf_counter() - t0)

    async def _wait(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


# A bounded model: a small open model on a long task, not a frontier one. It lapses on one step in ten
# and more on long prompts, overlooks text far back in the prompt, and knows typical object places only
# partly. Each can be set in the model name, e.g. sim/bounded?lapse=0.05&knowledge=1.
DEFAULTS = {"lapse": 0.1, "per_1k_tokens": 0.1, "forget_per_1k": 0.5, "knowledge": 0.2}


class BoundedAgent(_SimBase):
    """Solves ALFWorld tasks from the visible text only; lapses more on long prompts."""

    def __init__(self, name: str = "sim/bounded", *, lapse: float = DEFAULTS["lapse"],
                 per_1k_tokens: float = DEFAULTS["per_1k_tokens"], forget_per_1k: float = DEFAULTS["forget_per_1k"],
                 knowledge: float = DEFAULTS["knowledge"], seed: int = 0):
        super().__init__(name, seed)
        self.lapse, self.per_1k_tokens, self.forget_per_1k = lapse, per_1k_tokens, forget_per_1k
        self.knowledge = knowledge

    def p_lapse(self, messages: list[Message]) -> float:
        return min(1.0, max(0.0, self.lapse + self.per_1k_tokens * prompt_tokens(messages) / 1000.0))

    def decide(self, messages: list[Message], sample: int = 0) -> Decision:
        rng = _rng(self.seed, sample, messages)
        p = self.p_lapse(messages)
        lapse_draw = rng.random()
        view = read_messages(messages, forget_per_1k=self.forget_per_1k, rng=rng)
        step = plan_step(view, rng, self.knowledge)
        if lapse_draw < p:
            action, think = _lapse(view, step.action, rng)
            if action is None:
                return Decision(f"Think: {think}", None, step.action, True, p)
            return Decision(f"Think: {think}\nAction: {action}", action, step.action, True, p)
        return Decision(f"Think: {step.think}\nAction: {step.action}", step.action, step.action, False, p)


def plan_step(view: View, rng: random.Random, knowledge: float = 1.0) -> Step:
    """The next step for what `view` shows: a game command (admissible when a list is shown) or a meta-action."""
    w = view.world
    step = Planner(view, rng, knowledge).plan()
    adm = view.admissible
    if adm:
        for _ in range(6):
            if step.action in adm:
                break
            if not _repair(w, step.action, adm):
                break
            step = Planner(view, rng, knowledge).plan()
        if step.action not in adm:
            step = _nearest(step, adm, w, rng)
    elif w.last_failed and w.last_cmd == step.action:
        # the same command just failed: learn from it once more, then try another way
        _repair(w, step.action, [])
        step2 = Planner(view, rng, knowledge).plan()
        if step2.action == step.action:
            others = [r for r in w.receptacles if r != w.location]
            step2 = Step(f"go to {rng.choice(others)}" if others else "look", "That did not work; I move on.")
        step = step2
    meta = _meta_step(view, step)
    return meta or step


def _repair(w: World, action: str, adm: list[str]) -> bool:
    """`action` is not possible: correct the belief that led to it. True when something changed."""
    m = re.match(r"go to (" + NAME + r")$", action)
    if m:
        if w.location != m.group(1) and (not adm or any(a.startswith("go to ") for a in adm)):
            w.location = m.group(1)
            return True
        return False
    m = re.match(r"open (" + NAME + r")$", action)
    if m:
        if w.closed.get(m.group(1)) is not False:
            w.closed[m.group(1)] = False
            return True
        return False
    m = re.match(r"take (" + NAME + r") from (" + NAME + r")$", action)
    if m:
        o, r = m.groups()
        if any(a == f"open {r}" for a in adm) and not w.closed.get(r):
            w.closed[r] = True
            return True
        if w.where.get(o) == r:
            del w.where[o]
            w.searched.add(r)
            return True
        return False
    m = re.match(r"move (" + NAME + r") to (" + NAME + r")$", action)
    if m:
        o, r = m.groups()
        if any(a == f"open {r}" for a in adm) and not w.closed.get(r):
            w.closed[r] = True
            return True
        if w.holding == o:
            w.holding, w.holding_known = None, True
            return True
        return False
    m = re.match(r"(?:heat|cool|clean|use) (" + NAME + r")", action)
    if m and adm:
        app = _names(action)[-1]
        if w.location != app and any(a == f"go to {app}" for a in adm):
            return False
        if w.location == app and any(a == f"go to {app}" for a in adm):
            w.location = None
            return True
    return False


def _nearest(step: Step, adm: list[str], w: World, rng: random.Random) -> Step:
    verb = step.action.split(" ", 1)[0]
    want = set(re.findall(r"[a-z]+|\d+", step.action))
    best, score = None, 0.0
    for a in adm:
        if a in ("help",):
            continue
        toks = set(re.findall(r"[a-z]+|\d+", a))
        s = len(want & toks) / max(1, len(want | toks)) + (0.5 if a.split(" ", 1)[0] == verb else 0.0)
        if s > score:
            best, score = a, s
    if best is None or score < 0.6:
        gos = [a for a in adm if a.startswith("go to ")]
        best = rng.choice(gos or [a for a in adm if a != "help"] or adm)
    return Step(best, step.think.rstrip(".") + f"; the closest thing I can do is {best}.", step.intent)


class LatencyAgent(BoundedAgent):
    """sim/bounded that waits `ms` milliseconds per reply (for benchmarks)."""

    def __init__(self, name: str, *, ms: float = 200.0, **kw):
        super().__init__(name, **kw)
        self.ms = ms

    async def _wait(self) -> None:
        await asyncio.sleep(self.ms / 1000.0)


class RandomAgent(_SimBase):
    """Baseline: a random admissible action, or 'look' when none is shown."""

    def decide(self, messages: list[Message], sample: int = 0) -> Decision:
        rng = _rng(self.seed, sample, messages)
        user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") != "system"), "")
        adm = []
        for k, _, b in split_sections(user):
            if k == "admissible":
                adm = parse_admissible(b)
        action = rng.choice(adm) if adm else "look"
        text = f"Think: I try something.\nAction: {action}"
        return Decision(text, action, action, False, 0.0)


# ------------------------------------------------------------------------------------------------------
# Names
# ------------------------------------------------------------------------------------------------------
_PARAMS: dict[str, dict[str, type]] = {
    "bounded": {"lapse": float, "per_1k_tokens": float, "forget_per_1k": float, "knowledge": float, "seed": int},
    "latency": {"ms": float, "lapse": float, "per_1k_tokens": float, "forget_per_1k": float, "knowledge": float,
                "seed": int},
    "random": {"seed": int},
}


def make_sim(spec: str) -> _SimBase:
    """'sim/bounded?lapse=0.05&per_1k_tokens=0.02&seed=0' -> a simulated model. Unknown names or bad
    parameters raise ModelNotFoundError with one line."""
    if not spec.startswith("sim/"):
        raise ModelNotFoundError(f"not a simulated model name: {spec!r} (expected sim/<name>)")
    base, _, query = spec[4:].partition("?")
    if base not in _PARAMS:
        raise ModelNotFoundError(f"unknown simulated model {spec!r}; known: "
                                 + ", ".join(f"sim/{n}" for n in _PARAMS))
    allowed = _PARAMS[base]
    kw: dict[str, float | int] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ModelNotFoundError(f"bad parameters in {spec!r}: expected key=value&key=value") from None
    for k, v in pairs:
        if k not in allowed:
            raise ModelNotFoundError(f"unknown parameter {k!r} for sim/{base} in {spec!r}; "
                                     f"allowed: {', '.join(allowed)}")
        try:
            val = allowed[k](v)
        except ValueError:
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} is not a valid "
                                     f"{allowed[k].__name__}") from None
        if k in ("lapse", "per_1k_tokens", "forget_per_1k", "knowledge", "ms") and not (val >= 0 and val == val and val != float("inf")):
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} must be a finite number >= 0")
        if k in ("lapse", "knowledge") and val > 1:
            raise ModelNotFoundError(f"parameter {k}={v!r} of {spec!r} must be between 0 and 1")
        kw[k] = val
    if base == "bounded":
        return BoundedAgent(spec, **kw)  # type: ignore[arg-type]
    if base == "latency":
        return LatencyAgent(spec, **kw)  # type: ignore[arg-type]
    return RandomAgent(spec, seed=int(kw.get("seed", 0)))


__all__ = ["make_sim", "BoundedAgent", "RandomAgent", "LatencyAgent", "Decision", "Goal", "parse_goal",
           "read_messages", "plan_step", "prompt_tokens"]
