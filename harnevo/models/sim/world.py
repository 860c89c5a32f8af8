"""The world the sim rebuilds from the text it is shown: receptacles, where objects are, what is open,
where it stands, what it holds, object states, lessons. Engine sentences, history entries and panels
each update it; later text overrides earlier."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harnevo.models.sim.knowledge import STATE_OF
from harnevo.models.sim.panels import BeliefRead, ExperienceRead, Panel, ProgressRead, is_belief_block
from harnevo.models.sim.text import META, NAME, names_in


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
    panels: list[Panel] = field(default_factory=list)  # every panel read, in reading order

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
                for r in names_in(m.group(1)):
                    self.add_receptacle(r)
            elif kind == "arrive":
                self.location = m.group(1)
                self.add_receptacle(m.group(1))
            elif kind in ("on", "in"):
                self.add_receptacle(m.group(1))
                self.set_contents(m.group(1), names_in(m.group(2)))
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
                objs = names_in(m.group(1))
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

    # --- history entries ---
    def read_entry(self, cmd: str | None, obs: str) -> None:
        head = (cmd or "").split(" ", 1)[0].lower()
        if head in META:
            if head == "track" or is_belief_block(obs):
                self.read_belief(obs)
            elif head == "recall":
                self.read_lessons(obs, header=True)
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
        panel = BeliefRead.parse(text)
        self.panels.append(panel)
        not_visited: list[str] | None = None
        seen_here: set[str] = set()
        for ln in panel.lines:
            if ln.kind == "location":
                self.location = ln.names[0] if ln.names else None
            elif ln.kind == "holding":
                self.holding = ln.names[0] if ln.names else None
                self.holding_known, self.suspect_holding = True, False
            elif ln.kind == "open":
                for r in ln.names:
                    self.closed[r] = False
            elif ln.kind == "not visited":
                not_visited = list(ln.names)
            elif ln.kind == "states":
                for o, s in ln.states:
                    self.state(o, s)
            elif ln.kind == "receptacle":
                r, note, val = ln.names[0], ln.note, ln.value
                self.add_receptacle(r)
                seen_here.add(r)
                objs = names_in(val)
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
        panel = ProgressRead.parse(text)
        self.panels.append(panel)
        for ln in panel.lines:
            if ln.kind != "done":
                continue
            t = ln.value.lower()
            p = re.search(r"(?:placed|put|moved|move) (" + NAME + r") (?:in|on|to|into) (" + NAME + r")", t)
            if p:
                self.where[p.group(1)] = p.group(2)
            s = re.search(r"(heated|cooled|cleaned|heat|cool|clean) (" + NAME + r")", t)
            if s:
                self.state(s.group(2), {"he": "hot", "co": "cool", "cl": "clean"}[s.group(1)[:2]])

    def read_lessons(self, text: str, *, header: bool = False) -> None:
        panel = ExperienceRead.parse(text, header=header)
        self.panels.append(panel)
        self.lessons += panel.lessons
