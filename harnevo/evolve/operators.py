"""Variation operators over the harness genome (harnevo/harness/genome.py), and the registry they live in.

An operator only *proposes* gene values; the child is always made by `genome.with_genes` (the loader of
harness files) from the parent's normal form, then normalized. So a child is valid by construction or a
HarnessError, which is counted and retried (at most `attempts` tries), never returned. A child with the
parent's behaviour id is a no-op and is retried too (counted in `detail["no_op_tries"]`).

Operators (`fn(parent, rng, ctx) -> Proposal | None`; None: does not apply to this parent):
  structural  panel       toggle one of Belief/Progress/Experience together with its turn block
              mode        env_only / always_on / inline; turning a mode on gives it at least one panel and
                          its introduction block (workspace_intro, meta_actions), leaving a mode drops it
              guard       another action guard
              flag        another value of belief_scope, meta_actions_spend_budget or bare_line_fallback
              add_block, drop_block, move_block
                          a library block into `prompt.system`/`prompt.turn` (only blocks that would show
                          something; `examples` comes with a non-empty examples text), out of it (a list
                          never becomes empty), or to another place in it
  numeric     numeric     one int gene by a bounded step (about a quarter of its value, at least 1) or the
                          float gene by a Gaussian step (a tenth of its range), clipped to the gene's bounds
  text        text        a text gene swapped for another of its named variants (blocks/texts.yaml)
Only genes that have an effect on the parent are chosen (a gene is live when changing it changes the
normal form), so operators rarely propose no-ops. A hand-written harness (`templates`) gets the numeric
operator only: its `templates.*` text genes are left to the reflective LLM mutation of a later issue.

Crossovers (`fn(a, b, rng, ctx) -> (Proposal for a, Proposal for b) | None`):
  uniform     a random non-empty, proper subset of the genes where the parents differ is swapped
              (block lists as whole values; `templates.*` never)
  ordered     ordered crossover (OX) of each block list: a contiguous segment of one parent's list keeps its
              place, the other parent's remaining blocks fill the list in their order, so it has no duplicate
Both children must differ from both parents.

The registry is a value: `DEFAULT.register(name, fn, kind, weight)` returns a new registry (nothing global
changes). An operator may be async: `amutate`/`acrossover` await it; `mutate`/`crossover` refuse it.
`ctx` (OperatorContext) carries what a later operator needs (the generation, evidence such as failure
traces); the built-ins ignore it. Every random choice is drawn from the `random.Random` passed in."""

from __future__ import annotations

import inspect
import math
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generator, Literal, Mapping, Sequence

from harnevo.errors import HarnessError, HarnevoError
from harnevo.harness import blocks
from harnevo.harness.genome import (GENOME, PANELS, Gene, behaviour_id, gene, genes_of, get, normalize,
                                    normalized_data, with_genes)
from harnevo.harness.spec import Harness

Kind = Literal["mutation", "crossover"]
KINDS: tuple[Kind, ...] = ("mutation", "crossover")
DEFAULT_ATTEMPTS = 20
INT_STEP = 0.25  # an int gene moves by about this fraction of its value (at least 1)
FLOAT_STEP = 0.1  # a float gene moves by a Gaussian with this fraction of its range as sigma
FLOAT_DECIMALS = 2
MODE_INTRO = {"always_on": "workspace_intro", "inline": "meta_actions"}  # the system block that explains a mode
# Where a block goes when an operator adds it for a reason (a panel, a mode): after the blocks that precede it
# here. The order the seeds use; tests check that it names every library block.
REFERENCE_ORDER = {
    "system": ("role", "workspace_intro", "meta_actions", "reply_format", "commands", "game_commands",
               "admissible_rule", "names_rule", "examples"),
    "turn": ("task", "room", "history", "belief", "progress", "experience", "observation", "guard_note",
             "admissible", "step_line", "steps_left_line"),
}
_OWN_OPERATOR = {"mode", "guard"} | {f"memory.{p}" for p in PANELS}  # categorical genes with their own operator


class VariationError(HarnevoError):
    """No valid new child within the attempts (or no operator applies)."""


@dataclass(frozen=True)
class OperatorContext:
    """What an operator may know beyond the parent. Empty for the built-ins; the reflective mutation will
    read failure traces from `evidence`."""

    generation: int = 0
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Proposal:
    """Gene values for a child (`{gene name: value}`, applied with `genome.with_genes`) and a note on the
    change (JSON-able; it goes into `Child.detail`)."""

    genes: Mapping[str, Any]
    note: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Child:
    """A new harness with its lineage: `parents` are behaviour ids, the primary parent first (the one the
    child was built from); `detail["genes"]` maps each changed gene to [value before, value after]."""

    harness: Harness
    parents: tuple[str, ...]
    operator: str
    detail: dict[str, Any]

    def after(self, first: "Child") -> "Child":
        """This child as one step from `first`'s parents: for a mutation of a crossover child, or a chain of
        mutations. The genes are those changed from `first`'s primary parent (changes that cancel out are
        gone); `steps` lists the operators in order."""
        genes = {k: list(v) for k, v in first.detail.get("genes", {}).items()}
        for k, (old, new) in self.detail.get("genes", {}).items():
            genes[k] = [genes[k][0] if k in genes else old, new]
        genes = {k: v for k, v in genes.items() if v[0] != v[1]}
        return Child(self.harness, first.parents, f"{first.operator}+{self.operator}",
                     {"genes": genes, "steps": [*first.detail.get("steps", [first.operator]), self.operator]})


MutationFn = Callable[[Harness, random.Random, OperatorContext], "Proposal | None | Awaitable[Proposal | None]"]
CrossoverFn = Callable[[Harness, Harness, random.Random, OperatorContext],
                       "tuple[Proposal, Proposal] | None | Awaitable[tuple[Proposal, Proposal] | None]"]


@dataclass(frozen=True)
class Operator:
    name: str
    fn: Callable[..., Any]
    kind: Kind
    weight: float


@dataclass(frozen=True)
class Registry:
    """Operators by name, each with a kind and a weight (chance of being picked, relative to the others of
    its kind that apply). Immutable: `register` and `without` return new registries."""

    operators: tuple[Operator, ...] = ()

    def register(self, name: str, fn: Callable[..., Any], kind: Kind = "mutation", weight: float = 1.0) -> "Registry":
        if not name:
            raise ValueError("an operator needs a name")
        if kind not in KINDS:
            raise ValueError(f"operator kind {kind!r}: choose mutation or crossover")
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight > 0):
            raise ValueError(f"operator {name!r}: weight must be a positive number, got {weight!r}")
        kept = tuple(o for o in self.operators if o.name != name)
        return Registry(kept + (Operator(name, fn, kind, float(weight)),))

    def without(self, *names: str) -> "Registry":
        return Registry(tuple(o for o in self.operators if o.name not in names))

    def of(self, kind: Kind) -> tuple[Operator, ...]:
        return tuple(o for o in self.operators if o.kind == kind)

    def names(self, kind: Kind | None = None) -> list[str]:
        return [o.name for o in self.operators if kind is None or o.kind == kind]


# --- helpers ------------------------------------------------------------------------------------------------
def changed_genes(a: Harness, b: Harness) -> dict[str, tuple[Any, Any]]:
    """Every gene whose value differs between `a` and `b`: {gene: (value in a, value in b)}, genome order.
    A gene that applies to one of them only has None on the other side. Values are compared as given:
    pass normal forms to see only changes with an effect."""
    ga, gb = {g.name for g in genes_of(a)}, {g.name for g in genes_of(b)}
    order = [g.name for g in GENOME] + sorted(n for n in ga | gb if n.startswith("templates."))
    out: dict[str, tuple[Any, Any]] = {}
    for name in order:
        if name not in ga and name not in gb:
            continue
        va = get(a, name) if name in ga else None
        vb = get(b, name) if name in gb else None
        if va != vb:
            out[name] = (va, vb)
    return out


def _jsonable(changes: Mapping[str, tuple[Any, Any]]) -> dict[str, list[Any]]:
    return {k: [a, b] for k, (a, b) in changes.items()}


def _set(data: dict[str, Any], name: str, value: Any) -> None:
    *path, last = name.split(".")
    node = data
    for part in path:
        node = node[part]
    node[last] = list(value) if isinstance(value, tuple) else value


def _live(h: Harness, values: Mapping[str, Any], reference: dict[str, Any] | None = None) -> bool:
    """Whether these gene values would change the normal form of `h` (schema check only, no templates)."""
    data = h.model_dump(mode="json")
    for name, value in values.items():
        _set(data, name, value)
    try:
        other = Harness.validate_dict(data)
    except HarnessError:
        return False
    return normalized_data(other) != (reference if reference is not None else normalized_data(h))


def _insert_in_place(names: list[str], block: str, part: str) -> list[str]:
    """`block` inserted after the present blocks that precede it in REFERENCE_ORDER (at the end if the
    reference does not know it)."""
    ref = REFERENCE_ORDER[part]
    if block not in ref:
        return names + [block]
    before = set(ref[: ref.index(block)])
    at = 0
    for i, n in enumerate(names):
        if n in before:
            at = i + 1
    return names[:at] + [block] + names[at:]


def _child_name(parent: Harness, bid: str) -> str:
    root = parent.name.split("~", 1)[0][:180] or "harness"
    return f"{root}~{bid[:8]}"


def _build(base: Harness, proposal: Any, operator: str, parents_names: str) -> Harness:
    """The normalized child of `base` with the proposal's genes, named after its root and behaviour id."""
    if not isinstance(proposal, Proposal):
        raise TypeError(f"operator {operator!r} returned {type(proposal).__name__}, not a Proposal")
    child = normalize(with_genes(base, proposal.genes))
    data = child.model_dump(mode="json")
    data["name"] = _child_name(base, behaviour_id(child))
    data["description"] = f"{operator} of {parents_names}"
    return Harness.validate_dict(data, source=data["name"])


def _pick(ops: Sequence[Operator], rng: random.Random) -> Operator:
    total = sum(o.weight for o in ops)
    r = rng.random() * total
    for o in ops:
        r -= o.weight
        if r < 0:
            return o
    return ops[-1]


# --- mutation operators -------------------------------------------------------------------------------------
def _int_step(g: Gene, v: int, rng: random.Random) -> int:
    sigma = max(1.0, INT_STEP * abs(v))
    delta = max(1, round(abs(rng.gauss(0.0, sigma)))) * rng.choice((-1, 1))
    lo = -math.inf if g.low is None else g.low
    hi = math.inf if g.high is None else g.high
    new = int(min(max(v + delta, lo), hi))
    if new == v:  # at a bound: the other way
        new = int(min(max(v - delta, lo), hi))
    return new


def _float_step(g: Gene, v: float, rng: random.Random) -> float:
    lo = -math.inf if g.low is None else g.low
    hi = math.inf if g.high is None else g.high
    span = (hi - lo) if math.isfinite(hi - lo) else max(1.0, abs(v))
    for _ in range(10):
        new = round(min(max(v + rng.gauss(0.0, FLOAT_STEP * span), lo), hi), FLOAT_DECIMALS)
        if new != v:
            return new
    step = 10 ** -FLOAT_DECIMALS
    return round(v + step if v + step <= hi else v - step, FLOAT_DECIMALS)


def _probe(g: Gene, v: Any) -> Any:
    """Another valid value of a gene, to ask whether the gene is live."""
    if g.kind == "int":
        return v + 1 if g.high is None or v + 1 <= g.high else v - 1
    if g.kind == "float":
        return v + 0.1 if g.high is None or v + 0.1 <= g.high else v - 0.1
    if g.kind == "categorical":
        return next(c for c in g.choices if c != v)
    raise ValueError(g.kind)


def numeric_step(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """One live int or float gene moved by a bounded step."""
    ref = normalized_data(h)
    live = [g for g in genes_of(h) if g.kind in ("int", "float") and _live(h, {g.name: _probe(g, get(h, g))}, ref)]
    if not live:
        return None
    g = rng.choice(live)
    v = get(h, g)
    new = _int_step(g, v, rng) if g.kind == "int" else _float_step(g, v, rng)
    return Proposal({g.name: new}, {"gene": g.name})


def swap_text(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """A live text gene replaced by another of its named variants."""
    ref = normalized_data(h)
    options = []
    for g in genes_of(h):
        if g.kind != "text" or g.name.startswith("templates."):
            continue
        others = [(n, t) for n, t in g.variants if t != get(h, g)]
        if others and _live(h, {g.name: others[0][1]}, ref):
            options.append((g, others))
    if not options:
        return None
    g, others = rng.choice(options)
    name, text = rng.choice(others)
    return Proposal({g.name: text}, {"gene": g.name, "variant": name})


def toggle_panel(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """A panel on or off with its turn block (always_on), or its memory only (inline); one panel stays on."""
    if h.prompt is None or h.mode == "env_only":
        return None
    on = [p for p in PANELS if getattr(h.memory, p)]
    choices = [p for p in PANELS if not (p in on and len(on) == 1)]
    p = rng.choice(choices)
    turn = list(h.prompt.turn)
    genes: dict[str, Any] = {f"memory.{p}": p not in on}
    if p in on and p in turn:
        turn.remove(p)
        genes["prompt.turn"] = turn
    elif p not in on and h.mode == "always_on" and p not in turn:
        genes["prompt.turn"] = _insert_in_place(turn, p, "turn")
    return Proposal(genes, {"panel": p, "on": p not in on})


def change_mode(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """Another mode, made coherent: a workspace mode gets at least one panel (a random non-empty set when
    none is on) and its introduction block; the introduction of a mode that is left goes."""
    if h.prompt is None:
        return None
    new = rng.choice([m for m in gene("mode").choices if m != h.mode])
    genes: dict[str, Any] = {"mode": new}
    on = [p for p in PANELS if getattr(h.memory, p)]
    if new != "env_only" and not on:
        on = [p for p in PANELS if rng.random() < 0.5] or [rng.choice(PANELS)]
        genes.update({f"memory.{p}": p in on for p in PANELS})
    system, turn = list(h.prompt.system), list(h.prompt.turn)
    if new == "always_on":
        for p in on:
            if p not in turn:
                turn = _insert_in_place(turn, p, "turn")
    for mode, intro in MODE_INTRO.items():
        if mode == new and intro not in system:
            system = _insert_in_place(system, intro, "system")
        elif mode != new and intro in system and len(system) > 1:
            system.remove(intro)
    genes["prompt.system"], genes["prompt.turn"] = system, turn
    return Proposal(genes, {"mode": [h.mode, new]})


def change_guard(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """Another action guard."""
    if h.prompt is None:
        return None
    new = rng.choice([g for g in gene("guard").choices if g != h.guard])
    return Proposal({"guard": new})


def flip_flag(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """Another value of a live categorical gene that has no operator of its own."""
    ref = normalized_data(h)
    live = [g for g in genes_of(h) if g.kind == "categorical" and g.name not in _OWN_OPERATOR
            and _live(h, {g.name: _probe(g, get(h, g))}, ref)]
    if not live:
        return None
    g = rng.choice(live)
    return Proposal({g.name: rng.choice([c for c in g.choices if c != get(h, g)])}, {"gene": g.name})


def _companions(h: Harness, part: str, block: str) -> list[tuple[str, str, str]]:
    """Text genes a new block needs to show anything: (gene, variant name, text) for each non-empty variant
    of a text gene the block shows that is empty now (the `examples` block with no examples)."""
    out = []
    for field_ in sorted(blocks.text_fields_used(part, [block])):
        name = f"prompt.text.{field_}"
        if get(h, name) == "":
            out += [(name, n, t) for n, t in gene(name).variants if t]
    return out


def add_block(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """A library block that would show something, inserted at a random place of its list."""
    if h.prompt is None:
        return None
    ref = normalized_data(h)
    options = []
    for part in blocks.PARTS:
        present = list(getattr(h.prompt, part))
        for b in blocks.block_names(part):
            if b in present:
                continue
            comp = _companions(h, part, b)
            probe = {f"prompt.{part}": present + [b], **({comp[0][0]: comp[0][2]} if comp else {})}
            if _live(h, probe, ref):
                options.append((part, b, comp))
    if not options:
        return None
    part, b, comp = rng.choice(options)
    names = list(getattr(h.prompt, part))
    names.insert(rng.randint(0, len(names)), b)
    genes: dict[str, Any] = {f"prompt.{part}": names}
    note: dict[str, Any] = {"block": b, "part": part}
    if comp:
        gname, variant, text = rng.choice(comp)
        genes[gname] = text
        note["variant"] = variant
    return Proposal(genes, note)


def drop_block(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """A block out of a list that keeps at least one."""
    if h.prompt is None:
        return None
    options = [(part, b) for part in blocks.PARTS for b in getattr(h.prompt, part) if len(getattr(h.prompt, part)) > 1]
    if not options:
        return None
    part, b = rng.choice(options)
    return Proposal({f"prompt.{part}": [n for n in getattr(h.prompt, part) if n != b]}, {"block": b, "part": part})


def move_block(h: Harness, rng: random.Random, ctx: OperatorContext) -> Proposal | None:
    """A block moved to another place of its list."""
    if h.prompt is None:
        return None
    parts = [part for part in blocks.PARTS if len(getattr(h.prompt, part)) > 1]
    if not parts:
        return None
    part = rng.choice(parts)
    names = list(getattr(h.prompt, part))
    i = rng.randrange(len(names))
    b = names.pop(i)
    j = rng.choice([k for k in range(len(names) + 1) if k != i])
    names.insert(j, b)
    return Proposal({f"prompt.{part}": names}, {"block": b, "part": part, "from": i, "to": j})


# --- crossover operators ------------------------------------------------------------------------------------
def _shared_differing(a: Harness, b: Harness) -> list[str]:
    gb = {g.name for g in genes_of(b)}
    return [g.name for g in genes_of(a) if g.name in gb and not g.name.startswith("templates.")
            and get(a, g) != get(b, g)]


def uniform_crossover(a: Harness, b: Harness, rng: random.Random, ctx: OperatorContext):
    """Swap a random non-empty proper subset of the genes where the parents differ."""
    differ = _shared_differing(a, b)
    if len(differ) < 2:
        return None
    while True:
        taken = [g for g in differ if rng.random() < 0.5]
        if 0 < len(taken) < len(differ):
            break
    note = {"swapped": taken}
    return Proposal({g: get(b, g) for g in taken}, note), Proposal({g: get(a, g) for g in taken}, note)


def ordered_blocks(first: Sequence[str], second: Sequence[str], rng: random.Random) -> list[str]:
    """OX for lists of distinct names that need not hold the same names: a random contiguous segment of
    `first` keeps its place (as far as the list is long enough), the names of `second` that the segment
    lacks fill the rest in `second`'s order. No name appears twice."""
    if not first:
        return list(dict.fromkeys(second))
    i = rng.randrange(len(first))
    j = rng.randrange(i + 1, len(first) + 1)
    segment = list(first[i:j])
    rest = [n for n in dict.fromkeys(second) if n not in segment]
    at = min(i, len(rest))
    return rest[:at] + segment + rest[at:]


def ordered_crossover(a: Harness, b: Harness, rng: random.Random, ctx: OperatorContext):
    """OX of each block list where the parents' lists differ; every other gene stays the parent's own."""
    if a.prompt is None or b.prompt is None:
        return None
    parts = [p for p in blocks.PARTS if getattr(a.prompt, p) != getattr(b.prompt, p)]
    if not parts:
        return None
    ga, gb = {}, {}
    for p in parts:
        la, lb = list(getattr(a.prompt, p)), list(getattr(b.prompt, p))
        ga[f"prompt.{p}"] = ordered_blocks(la, lb, rng)
        gb[f"prompt.{p}"] = ordered_blocks(lb, la, rng)
    return Proposal(ga, {"parts": parts}), Proposal(gb, {"parts": parts})


DEFAULT = (Registry()
           .register("numeric", numeric_step, weight=2.0)
           .register("text", swap_text, weight=1.0)
           .register("panel", toggle_panel, weight=1.0)
           .register("mode", change_mode, weight=0.5)
           .register("guard", change_guard, weight=0.5)
           .register("flag", flip_flag, weight=0.5)
           .register("add_block", add_block, weight=1.0)
           .register("drop_block", drop_block, weight=0.75)
           .register("move_block", move_block, weight=0.75)
           .register("uniform", uniform_crossover, kind="crossover", weight=1.0)
           .register("ordered", ordered_crossover, kind="crossover", weight=1.0))


# --- the retry loops (generators, driven sync or async) -------------------------------------------------------
Step = tuple[Operator, Callable[[], Any]]


def _mutation(parent: Harness, rng: random.Random, registry: Registry, ctx: OperatorContext | None,
              attempts: int) -> Generator[Step, Any, tuple[Child, int]]:
    ctx = ctx or OperatorContext()
    base = normalize(parent)
    pid = behaviour_id(base)
    ops = list(registry.of("mutation"))
    invalid = no_op = tried = 0
    while tried < attempts:
        if not ops:
            raise VariationError(f"no mutation operator applies to harness {parent.name!r}")
        op = _pick(ops, rng)
        result = yield op, (lambda op=op: op.fn(base, rng, ctx))
        if result is None:  # does not apply to this parent: out of the draw for this call
            ops = [o for o in ops if o is not op]
            continue
        tried += 1
        try:
            if isinstance(result, HarnessError):
                raise result
            child = _build(base, result, op.name, parent.name)
        except HarnessError:
            invalid += 1
            continue
        if behaviour_id(child) == pid:
            no_op += 1
            continue
        detail = {**dict(result.note), "genes": _jsonable(changed_genes(base, child)), "no_op_tries": no_op}
        return Child(child, (pid,), op.name, detail), invalid
    raise VariationError(f"no new valid mutant of harness {parent.name!r} in {attempts} tries "
                         f"({invalid} invalid, {no_op} without effect)")


def _mutations(parent: Harness, rng: random.Random, registry: Registry, ctx: OperatorContext | None,
               attempts: int, steps: int) -> Generator[Step, Any, tuple[Child, int]]:
    """`steps` mutations in a row as one child (its genes those changed from `parent`); a chain that comes
    back to `parent`'s behaviour (a step undone by a later one) takes one more step, within `attempts`."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    child, invalid = yield from _mutation(parent, rng, registry, ctx, attempts)
    pid, done, extra = child.parents[0], 1, 0
    while done < steps or child.harness.behaviour_id == pid:
        if extra > attempts:
            raise VariationError(f"no chain of {steps} mutations of harness {parent.name!r} leaves its behaviour "
                                 f"in {attempts} extra steps")
        extra += done >= steps
        nxt, inv = yield from _mutation(child.harness, rng, registry, ctx, attempts)
        child, invalid, done = nxt.after(child), invalid + inv, done + 1
    return child, invalid


def _crossing(a: Harness, b: Harness, rng: random.Random, registry: Registry, ctx: OperatorContext | None,
              attempts: int) -> Generator[Step, Any, tuple[Child, Child, int]]:
    ctx = ctx or OperatorContext()
    base_a, base_b = normalize(a), normalize(b)
    ida, idb = behaviour_id(base_a), behaviour_id(base_b)
    if ida == idb:
        raise VariationError(f"crossover of {a.name!r} and {b.name!r}: they behave alike (one candidate)")
    ops = list(registry.of("crossover"))
    invalid = no_op = tried = 0
    names = f"{a.name} x {b.name}"
    while tried < attempts:
        if not ops:
            raise VariationError(f"no crossover operator applies to {a.name!r} and {b.name!r} "
                                 f"(they differ in too few genes)")
        op = _pick(ops, rng)
        result = yield op, (lambda op=op: op.fn(base_a, base_b, rng, ctx))
        if result is None:
            ops = [o for o in ops if o is not op]
            continue
        tried += 1
        try:
            if isinstance(result, HarnessError):
                raise result
            if not (isinstance(result, tuple) and len(result) == 2):
                raise TypeError(f"crossover {op.name!r} returned {type(result).__name__}, not two Proposals")
            c1 = _build(base_a, result[0], op.name, names)
            c2 = _build(base_b, result[1], op.name, names)
        except HarnessError:
            invalid += 1
            continue
        if {behaviour_id(c1), behaviour_id(c2)} & {ida, idb}:
            no_op += 1
            continue
        d1 = {**dict(result[0].note), "genes": _jsonable(changed_genes(base_a, c1)), "no_op_tries": no_op}
        d2 = {**dict(result[1].note), "genes": _jsonable(changed_genes(base_b, c2)), "no_op_tries": no_op}
        return Child(c1, (ida, idb), op.name, d1), Child(c2, (idb, ida), op.name, d2), invalid
    raise VariationError(f"no two new valid children of {a.name!r} and {b.name!r} in {attempts} tries "
                         f"({invalid} invalid, {no_op} equal to a parent)")


def _call(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except HarnessError as e:
        return e


def _drive(gen: Generator[Step, Any, Any]) -> Any:
    try:
        op, call = next(gen)
        while True:
            result = _call(call)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(f"operator {op.name!r} is async: use amutate/acrossover")
            op, call = gen.send(result)
    except StopIteration as stop:
        return stop.value


async def _adrive(gen: Generator[Step, Any, Any]) -> Any:
    try:
        op, call = next(gen)
        while True:
            result = _call(call)
            if inspect.isawaitable(result):
                try:
                    result = await result
                except HarnessError as e:
                    result = e
            op, call = gen.send(result)
    except StopIteration as stop:
        return stop.value


# --- the public API -----------------------------------------------------------------------------------------
def mutate(parent: Harness, rng: random.Random, registry: Registry = DEFAULT, ctx: OperatorContext | None = None,
           attempts: int = DEFAULT_ATTEMPTS, steps: int = 1) -> tuple[Child, int]:
    """(a new, valid, normalized child of `parent`, invalid tries). With `steps` > 1 the child is that many
    mutations in a row (operator 'a+b+...', genes those changed from `parent`). Raises VariationError when no
    operator applies or `attempts` tries gave nothing new."""
    return _drive(_mutations(parent, rng, registry, ctx, attempts, steps))


async def amutate(parent: Harness, rng: random.Random, registry: Registry = DEFAULT,
                  ctx: OperatorContext | None = None, attempts: int = DEFAULT_ATTEMPTS,
                  steps: int = 1) -> tuple[Child, int]:
    """`mutate` for registries with async operators."""
    return await _adrive(_mutations(parent, rng, registry, ctx, attempts, steps))


def crossover(a: Harness, b: Harness, rng: random.Random, registry: Registry = DEFAULT,
              ctx: OperatorContext | None = None, attempts: int = DEFAULT_ATTEMPTS) -> tuple[Child, Child, int]:
    """(child built from a, child built from b, invalid tries); both children differ from both parents.
    Raises VariationError for parents that behave alike or differ too little to give two new children."""
    return _drive(_crossing(a, b, rng, registry, ctx, attempts))


async def acrossover(a: Harness, b: Harness, rng: random.Random, registry: Registry = DEFAULT,
                     ctx: OperatorContext | None = None, attempts: int = DEFAULT_ATTEMPTS) -> tuple[Child, Child, int]:
    """`crossover` for registries with async operators."""
    return await _adrive(_crossing(a, b, rng, registry, ctx, attempts))


def random_harness(rng: random.Random, seeds: Sequence[Harness], steps: int = 12, registry: Registry = DEFAULT,
                   attempts: int = DEFAULT_ATTEMPTS) -> tuple[Child, int]:
    """(a random valid harness, invalid tries) for `--search random`: a random walk of `steps` mutations
    from a seed drawn at random. Drawing every gene uniformly within its bounds would mostly give harnesses
    that cannot play (3 steps, 30,000-token replies, no observation block); the walk samples the space the
    operators reach. An evolution run with `init: random` fills its generation 0 with these too, so that
    from there on it differs from random search by selection and variation only."""
    if not seeds:
        raise ValueError("random_harness needs at least one seed")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    seed = seeds[rng.randrange(len(seeds))]
    start = normalize(seed)
    current, invalid, ops = start, 0, []
    for _ in range(steps):
        child, inv = mutate(current, rng, registry, attempts=attempts)
        current, invalid = child.harness, invalid + inv
        ops.append(child.operator)
    data = current.model_dump(mode="json")
    data["name"] = _child_name(seed, behaviour_id(current))
    data["description"] = f"random walk of {steps} mutations from {seed.name}"
    final = Harness.validate_dict(data, source=data["name"])
    detail = {"genes": _jsonable(changed_genes(start, final)), "seed": seed.name, "steps": ops}
    return Child(final, (behaviour_id(start),), "random", detail), invalid


__all__ = ["Child", "Proposal", "OperatorContext", "Operator", "Registry", "DEFAULT", "VariationError",
           "MutationFn", "CrossoverFn",
           "mutate", "amutate", "crossover", "acrossover", "random_harness", "changed_genes", "ordered_blocks",
           "REFERENCE_ORDER"]
