"""Planning the next step from a View: find the goal object, take it, transform it (heat, cool, clean,
or light it for `look`), put it in place; repair beliefs an admissible list contradicts, fall back to
the nearest admissible command, and use a meta-action when the system message offers them and one helps."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

from harnevo.models.sim.knowledge import APPLIANCE, GENERIC, LAMPS, OPENABLE, PRIORS, STATE_OF, SURFACES
from harnevo.models.sim.reading import View
from harnevo.models.sim.text import NAME, names_in, type_of
from harnevo.models.sim.world import World


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
        return [r for r in self.w.receptacles if type_of(r) == rtype]

    def goto_then(self, r: str, action: str, why: str) -> Step:
        if self.w.location != r:
            return Step(f"go to {r}", f"{why}; I go to {r}.")
        if self.w.closed.get(r) and (action.startswith(("take", "move")) or action == "search"):
            return Step(f"open {r}", f"The {r} is closed; I open it.")
        return Step(action, why + ".")

    def prior(self, what: str, rtype: str) -> float:
        table = PRIORS.get(what, GENERIC)
        score = 0.3
        if rtype in table:
            score = 4.0 + 6.0 * (len(table) - table.index(rtype)) / len(table)
        elif rtype in SURFACES:
            score = 2.5  # big open surfaces hold a bit of everything
        elif rtype in GENERIC:
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
            counts[type_of(r)] = counts.get(type_of(r), 0) + 1
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
            t = type_of(r)
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
        if held and type_of(held) == X:
            if g.family in APPLIANCE and STATE_OF[g.family] not in w.states.get(held, set()):
                app = self.appliance(g.family)
                if app:
                    verb = g.family
                    return self.goto_then(app, f"{verb} {held} with {app}",
                                          f"The {held} must be {STATE_OF[g.family]}")
            if g.family == "look":
                lamps = [o for o, r in w.where.items() if type_of(o) in LAMPS]
                lamps.sort(key=lambda o: (type_of(o) != g.target, o))
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
        cands = [o for o, r in w.where.items() if type_of(o) == X and not (dest and r == dest)]
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
            n = sum(1 for o, rr in w.where.items() if rr == r and type_of(o) == g.obj)
            return (-n if g.family == "pick2" else 0, r != w.location, bool(w.closed.get(r, type_of(r) in OPENABLE)),
                    w.receptacles.index(r))

        return min(targets, key=key)


def meta_step(view: View, step: Step) -> Step | None:
    """A meta-action, when the system message offers them and one would help now."""
    g, w, off = view.goal, view.world, view.offered
    if not off or g is None:
        return None
    if "recall" in off and view.at_start and not view.has_experience:
        return Step(f"recall {g.obj}", f"Lessons about where a {g.obj} is might help.", "meta")
    last = w.last_cmd or ""
    took = re.match(r"take (" + NAME + r") from (" + NAME + r")$", last)
    if took and not w.last_failed and type_of(took.group(1)) == g.obj and w.holding == took.group(1):
        rtype = type_of(took.group(2))
        if ("note" in off and len(w.searched) >= 5
                and not any(g.obj in l and rtype in l for l in w.lessons)):
            return Step(f"note {g.obj} can be found in {rtype}", f"I found the {g.obj} after a long search.",
                        "meta")
        if "commit" in off and g.family != "pick2":
            return Step(f"commit took {took.group(1)}", "I record the subgoal I just finished.", "meta")
    moved = re.match(r"move (" + NAME + r") to (" + NAME + r")$", last)
    if moved and not w.last_failed and g.family == "pick2" and "commit" in off \
            and type_of(moved.group(1)) == g.obj and type_of(moved.group(2)) == g.target:
        return Step(f"commit placed {moved.group(1)} in {moved.group(2)}", "One of the two is in place.", "meta")
    if "track" in off and not view.has_belief and view.truncated and not view.track_visible:
        if step.intent == "search" or not w.holding_known:
            q = g.obj if not (g.family == "look" and w.holding and type_of(w.holding) == g.obj) else g.target
            return Step(f"track {q}", "My history no longer shows where I have looked; I check my belief.",
                        "meta")
    return None


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
    meta = meta_step(view, step)
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
        app = names_in(action)[-1]
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
