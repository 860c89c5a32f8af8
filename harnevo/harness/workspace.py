"""The BPE workspace of one episode: Belief (kept from observations), Progress (subgoals and status) and
Experience (an ExperienceBank shared across episodes), with the meta-actions that reach them:
`track [q]` reads belief, `commit [subgoal]` writes progress, `recall [q]` reads experience and
`note [insight]` writes experience.

The bank a Workspace is given is the episode's own snapshot (`ExperienceBank.snapshot()`): reads come
from it, and every change the episode makes to experience (a lesson used, a lesson added) is recorded in
`bank_edits` for the evaluator to apply in a fixed order; nothing here writes a shared bank."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harnevo.harness.belief import Belief, object_type
from harnevo.harness.experience import ExperienceBank, Lesson
from harnevo.harness.spec import MemoryPolicy
from harnevo.harness.task import TaskGoal


@dataclass
class Subgoal:
    text: str
    done: bool = False
    by_model: bool = False


@dataclass
class Workspace:
    memory: MemoryPolicy
    goal: TaskGoal
    bank: ExperienceBank | None = None
    belief: Belief = field(default_factory=Belief)
    subgoals: list[Subgoal] = field(default_factory=list)
    recalled: list[Lesson] = field(default_factory=list)  # lessons shown in the panel / by the last recall
    lessons_noted: list[str] = field(default_factory=list)
    bank_edits: list[dict] = field(default_factory=list)  # what this episode changes in the bank, in order
    _panel_queried: bool = False

    @classmethod
    def start(cls, memory: MemoryPolicy, goal: TaskGoal, room: str, bank: ExperienceBank | None) -> "Workspace":
        ws = cls(memory=memory, goal=goal, bank=bank if memory.experience else None)
        ws.belief.observe_room(room)
        if memory.progress:
            ws.subgoals = [Subgoal(s) for s in goal.subgoals()]
        return ws

    # --- updates from the engine ----------------------------------------------------------------------
    def observe(self, obs_text: str) -> None:
        self.belief.observe(obs_text)
        if self.memory.progress:
            self._auto_progress()

    def _auto_progress(self) -> None:
        o = self.goal.obj
        if not o:
            return
        b = self.belief
        held = [x for x in b.holding if object_type(x) == o]
        seen = held or [x for items in b.contents.values() if items for x in items if object_type(x) == o]
        in_target = [x for rec, items in b.contents.items() if items and object_type(rec) == self.goal.target
                     for x in items if object_type(x) == o]
        for sg in self.subgoals:
            if sg.done or sg.by_model:
                continue
            t = sg.text
            if t.startswith("find first") or (t.startswith("find ") and self.goal.obj in t and "second" not in t):
                sg.done = bool(seen or in_target)
            elif t.startswith("take "):
                sg.done = bool(held)
            elif t.split(" ")[0] in ("clean", "heat", "cool"):
                word = {"clean": "clean", "heat": "hot", "cool": "cool"}[t.split(" ")[0]]
                sg.done = any(object_type(x) == o and s == word for x, s in b.states.items())
            elif t.startswith("find ") and self.goal.family == "look":
                sg.done = any(object_type(x) == self.goal.target for items in b.contents.values() if items
                              for x in items)
            elif t.startswith("use "):
                sg.done = any(object_type(x) == self.goal.target and s == "on" for x, s in b.states.items())
            elif t.startswith("put first"):
                sg.done = len(in_target) >= 1
            elif t.startswith("find second"):
                sg.done = len(in_target) >= 1 and bool(held or len(seen) >= 1)
            elif t.startswith("put second"):
                sg.done = len(in_target) >= 2

    # --- panels ------------------------------------------------------------------------------------------
    def belief_panel(self, query: str | None = None) -> str:
        relevant = None
        if self.memory.belief_scope == "task":
            relevant = [x for x in (self.goal.obj, self.goal.target) if x]
        return self.belief.render(relevant=relevant, query=query)

    def progress_panel(self) -> str:
        if not self.subgoals:
            return "- (no subgoals yet)"
        return "\n".join(f"- [{'done' if s.done else 'todo'}] {s.text}" for s in self.subgoals)

    def experience_panel(self) -> str:
        """The lessons for this task, chosen once per episode from the snapshot (a recall replaces them)."""
        if self.bank is None:
            return ""
        if not self._panel_queried:
            self._panel_queried = True
            self.recalled = self._recall(self.goal.text)
        return ExperienceBank.render(self.recalled)

    def _recall(self, query: str) -> list[Lesson]:
        assert self.bank is not None
        hits = self.bank.recall(query, self.memory.experience_shown)
        self.bank_edits.extend({"op": "use", "id": lesson.id} for lesson in hits)
        return hits

    def panels(self, mode: str) -> dict[str, str]:
        """The panels a turn message shows: all enabled panels in `always_on`, none otherwise."""
        if mode != "always_on":
            return {"belief": "", "progress": "", "experience": ""}
        return {
            "belief": self.belief_panel() if self.memory.belief else "",
            "progress": self.progress_panel() if self.memory.progress else "",
            "experience": self.experience_panel() if self.memory.experience else "",
        }

    # --- meta-actions ------------------------------------------------------------------------------------
    def meta(self, name: str, arg: str) -> str:
        """Run one meta-action; its result is the observation shown on the next turn."""
        arg = arg.strip()
        if name == "track":
            if not self.memory.belief:
                return "[track] belief is not kept by this harness."
            return self.belief_panel(query=arg or None)
        if name == "commit":
            if not self.memory.progress:
                return "[commit] progress is not kept by this harness."
            if not arg:
                return "Progress:\n" + self.progress_panel()
            self._commit(arg)
            return "Progress:\n" + self.progress_panel()
        if name == "recall":
            if self.bank is None:
                return "[recall] experience is not kept by this harness."
            self.recalled = self._recall(arg or self.goal.text)
            self._panel_queried = True
            return "Experience:\n" + ExperienceBank.render(self.recalled)
        if name == "note":
            if self.bank is None:
                return "[note] experience is not kept by this harness."
            if not arg:
                return "[note] nothing to note: write `note <insight>`."
            self.lessons_noted.append(arg)
            return f"Noted: {arg}"
        raise ValueError(f"unknown meta-action {name!r}")

    def _commit(self, text: str) -> None:
        words = set(re.findall(r"[a-z]+", text.lower())) - {"the", "a", "an", "in", "on", "to", "with", "done"}
        best, best_overlap = None, 0
        for sg in self.subgoals:
            overlap = len(words & set(re.findall(r"[a-z]+", sg.text.lower())))
            if not sg.done and overlap > best_overlap:
                best, best_overlap = sg, overlap
        if best is not None and best_overlap >= 2:
            best.done, best.by_model = True, True
        else:
            self.subgoals.append(Subgoal(text, done=True, by_model=True))

    # --- end of episode -----------------------------------------------------------------------------
    def finish(self, won: bool) -> None:
        """Record what this episode teaches (as edits, not applied here): notes always; on a win, where
        the object was."""
        if self.bank is None:
            return
        self.bank_edits.extend({"op": "add", "text": note} for note in self.lessons_noted)
        if won and self.goal.obj:
            where = self.belief.found_at.get(self.goal.obj)
            if where:
                self.bank_edits.append({"op": "add", "text": f"{self.goal.obj} was found at a {where}"})
