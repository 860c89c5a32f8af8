"""The simulated models: `BoundedAgent` (sim/bounded), `LatencyAgent` (sim/latency) and `RandomAgent`
(sim/random), and the lapses (wrong or malformed actions) of a bounded model."""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import time
from dataclasses import dataclass

from harnevo.models.base import Message, Reply, Usage, approx_tokens
from harnevo.models.sim.planner import plan_step
from harnevo.models.sim.reading import View, parse_admissible, read_messages, split_sections
from harnevo.models.sim.text import names_in, type_of


def lapse_step(view: View, planned: str, rng: random.Random) -> tuple[str | None, str]:
    """A wrong or malformed action: (action or None for chatter, thought)."""
    adm = [a for a in (view.admissible or []) if a != planned]
    w = view.world
    if adm and rng.random() < 0.5:
        return rng.choice(adm), "I think this will help."
    kind = rng.randrange(5)
    names = names_in(planned)
    if kind == 0 and names:  # a non-existent number
        n = names[-1]
        return planned.replace(n, f"{type_of(n)} {rng.randint(20, 40)}"), "I go on."
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


def reply_rng(seed: int, sample: int, messages: list[Message]) -> random.Random:
    """The randomness of one reply: seeded by (seed, sample, the full message text)."""
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


class SimModel:
    """What every simulated model shares: the Model contract (`complete`, `aclose`, `simulated`) over a
    `decide(messages, sample)` that reads only the messages."""

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


class BoundedAgent(SimModel):
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
        rng = reply_rng(self.seed, sample, messages)
        p = self.p_lapse(messages)
        lapse_draw = rng.random()
        view = read_messages(messages, forget_per_1k=self.forget_per_1k, rng=rng)
        step = plan_step(view, rng, self.knowledge)
        if lapse_draw < p:
            action, think = lapse_step(view, step.action, rng)
            if action is None:
                return Decision(f"Think: {think}", None, step.action, True, p)
            return Decision(f"Think: {think}\nAction: {action}", action, step.action, True, p)
        return Decision(f"Think: {step.think}\nAction: {step.action}", step.action, step.action, False, p)


class LatencyAgent(BoundedAgent):
    """sim/bounded that waits `ms` milliseconds per reply (for benchmarks)."""

    def __init__(self, name: str, *, ms: float = 200.0, **kw):
        super().__init__(name, **kw)
        self.ms = ms

    async def _wait(self) -> None:
        await asyncio.sleep(self.ms / 1000.0)


class RandomAgent(SimModel):
    """Baseline: a random admissible action, or 'look' when none is shown."""

    def decide(self, messages: list[Message], sample: int = 0) -> Decision:
        rng = reply_rng(self.seed, sample, messages)
        user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") != "system"), "")
        adm = []
        for k, _, b in split_sections(user):
            if k == "admissible":
                adm = parse_admissible(b)
        action = rng.choice(adm) if adm else "look"
        text = f"Think: I try something.\nAction: {action}"
        return Decision(text, action, action, False, 0.0)
