"""Variation operators over the genome, the DEAP toolbox, selection and the best rule, on the real seeds."""

from __future__ import annotations

import asyncio
import json
import pickle
import random
import subprocess
import sys
from collections import Counter

import pytest

from harnevo.errors import HarnessError, HarnevoError
from harnevo.evolve import operators as ops
from harnevo.evolve.operators import (DEFAULT, REFERENCE_ORDER, Child, OperatorContext, Proposal, Registry,
                                      VariationError, amutate, changed_genes, crossover, mutate, ordered_blocks,
                                      random_harness)
from harnevo.evolve.selection import elitist_survivors, tournament
from harnevo.evolve.toolbox import (Individual, SearchConfigError, SearchSettings, best_of, build_toolbox,
                                    fitness_values, front, front_ids)
from harnevo.harness import blocks
from harnevo.harness.genome import PANELS, gene, genes_of, get, normalize, with_genes
from harnevo.harness.spec import Harness, load_harness

SEEDS = ("react", "bpe_always_on", "bpe_inline")
CTX = OperatorContext()


def _seeds() -> list[Harness]:
    return [load_harness(n) for n in SEEDS]


def _hand_written() -> Harness:
    seed = load_harness("react")
    data = seed.model_dump(mode="json")
    data["name"], data["prompt"], data["templates"] = "hand", None, seed.template_sources()
    return Harness.from_dict(data)


def _check_child(child: Child, primary: Harness, other: Harness | None = None) -> None:
    h = child.harness
    again = Harness.from_yaml(h.to_yaml(), source="round trip")
    assert again == h and again.behaviour_id == h.behaviour_id
    assert normalize(h) == h
    pid = primary.behaviour_id
    assert child.parents == ((pid,) if other is None else (pid, other.behaviour_id))
    assert h.behaviour_id != pid and (other is None or h.behaviour_id != other.behaviour_id)
    want = {k: [a, b] for k, (a, b) in changed_genes(normalize(primary), h).items()}
    assert want and child.detail["genes"] == want
    json.dumps(child.detail)
    if h.prompt is not None:
        for part in blocks.PARTS:
            names = getattr(h.prompt, part)
            assert len(names) == len(set(names)) and set(names) <= set(blocks.block_names(part))
    for g in genes_of(h):
        if g.kind in ("int", "float"):
            v = get(h, g)
            assert g.low <= v <= g.high and (type(v) is int) == (g.kind == "int"), (g.name, v)
    if h.mode != "env_only":
        assert any(getattr(h.memory, p) for p in PANELS)
    if primary.templates is not None:
        assert h.templates == primary.templates
        assert {n for n in want} <= {g.name for g in genes_of(h) if g.kind in ("int", "float")}


def test_500_children_load_as_files_with_the_same_behaviour_id():
    rng = random.Random(2024)
    seeds = _seeds() + [_hand_written()]
    pool = list(seeds)
    used: Counter = Counter()
    made = crossings = refused = 0
    while made < 500:
        if rng.random() < 0.3:
            a, b = rng.sample(pool, 2)
            if a.behaviour_id == b.behaviour_id:
                continue
            crossings += 1
            try:
                c1, c2, _ = crossover(a, b, rng)
            except VariationError:
                refused += 1
                continue
            batch = [(c1, a, b), (c2, b, a)]
        else:
            p = pool[rng.randrange(len(pool))]
            c, _ = mutate(p, rng)
            batch = [(c, p, None)]
        for child, primary, other in batch:
            _check_child(child, primary, other)
            used[child.operator] += 1
            made += 1
        pool = seeds + (pool[len(seeds):] + [c.harness for c, _, _ in batch])[-40:]
    assert set(used) == set(DEFAULT.names()), used  # every built-in operator was exercised
    assert refused <= crossings // 5


def _sequence(seed: int, n: int = 30) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    pool = _seeds()
    out = []
    for i in range(n):
        if i % 3 == 2:
            a, b = pool[-1], pool[rng.randrange(len(pool) - 1)]
            try:
                children = list(crossover(a, b, rng)[:2])
            except VariationError:
                children = []
        else:
            children = [mutate(pool[rng.randrange(len(pool))], rng)[0]]
        for c in children:
            pool.append(c.harness)
            out.append((c.harness.id, c.operator, json.dumps(c.detail, sort_keys=True)))
    return out


def test_the_same_seed_gives_the_same_children_and_the_global_random_is_untouched():
    random.seed(12345)
    state = random.getstate()
    first = _sequence(11)
    assert random.getstate() == state
    assert first == _sequence(11)
    assert first != _sequence(12)
    tb = build_toolbox(SearchSettings(), random.Random(3))
    ids = [h.behaviour_id for h in _seeds()] + ["x", "y"]
    fit = {k: (i / 10, -i, -1.0) for i, k in enumerate(ids)}
    tb.select_parents(ids, fit, 8)
    tb.select_survivors(ids, fit, 4)
    tb.vary(_seeds())
    assert random.getstate() == state


def test_changed_genes_is_exact():
    react = load_harness("react")
    child = with_genes(react, {"memory.history_window": 12, "guard": "reject",
                               "prompt.turn": ["task", "observation", "room", "history", "step_line"]})
    assert changed_genes(react, child) == {
        "guard": ("none", "reject"), "memory.history_window": (8, 12),
        "prompt.turn": (["task", "room", "history", "observation", "step_line"],
                        ["task", "observation", "room", "history", "step_line"])}
    assert changed_genes(child, react)["guard"] == ("reject", "none")
    assert changed_genes(react, react.evolve(name="other")) == {}
    hand = _hand_written()
    assert changed_genes(hand, with_genes(hand, {"model.temperature": 0.5})) == {"model.temperature": (0.0, 0.5)}
    mixed = changed_genes(react, hand)
    assert mixed["prompt.system"][1] is None and mixed["templates.turn"][0] is None
    numeric_only = Registry().register("numeric", ops.numeric_step)
    c, invalid = mutate(react, random.Random(0), numeric_only)
    assert invalid == 0 and c.operator == "numeric" and len(c.detail["genes"]) == 1
    (name, (old, new)), = c.detail["genes"].items()
    assert c.detail["gene"] == name and get(react, name) == old and get(c.harness, name) == new != old


def test_numeric_steps_stay_within_the_bounds():
    edge = with_genes(load_harness("bpe_always_on"), {"memory.history_window": 200, "model.temperature": 2.0,
                                                      "model.max_tokens": 8, "budget.max_steps": 1,
                                                      "memory.experience_shown": 0, "memory.experience_bank_size": 500})
    numeric_only = Registry().register("numeric", ops.numeric_step)
    rng = random.Random(5)
    moved = Counter()
    for _ in range(80):
        c, invalid = mutate(edge, rng, numeric_only)
        assert invalid == 0  # clipped to the bounds, never left to the loader to refuse
        (name, (old, new)), = c.detail["genes"].items()
        g = gene(name)
        assert g.low <= new <= g.high and new != old
        moved[name] += 1
    assert set(moved) == {"memory.history_window", "model.temperature", "model.max_tokens", "budget.max_steps",
                          "memory.experience_shown", "memory.experience_bank_size"}
    # inert genes are not chosen: react has no experience, so its bank sizes never move
    for _ in range(40):
        c, _ = mutate(load_harness("react"), rng, numeric_only)
        assert not {"memory.experience_shown", "memory.experience_bank_size"} & set(c.detail["genes"])


def test_a_hand_written_harness_only_gets_numeric_changes():
    hand = _hand_written()
    rng = random.Random(9)
    for _ in range(30):
        c, _ = mutate(hand, rng)
        assert c.operator == "numeric"
        _check_child(c, hand)


def test_panel_toggle_moves_the_memory_and_the_turn_block_together():
    always, inline, react = load_harness("bpe_always_on"), load_harness("bpe_inline"), load_harness("react")
    assert ops.toggle_panel(react, random.Random(0), CTX) is None  # env_only: no panels to toggle
    for s in range(30):
        p = ops.toggle_panel(always, random.Random(s), CTX)
        child = normalize(with_genes(always, p.genes))
        panel, on = p.note["panel"], p.note["on"]
        assert getattr(child.memory, panel) is on and (panel in child.prompt.turn) is on
        assert not on  # all three are on in the seed
        one = normalize(with_genes(always, {"memory.belief": False, "memory.progress": False,
                                            "prompt.turn": [b for b in always.prompt.turn
                                                            if b not in ("belief", "progress")]}))
        p = ops.toggle_panel(one, random.Random(s), CTX)
        assert p.note["on"] and p.note["panel"] in ("belief", "progress")  # the last panel stays on
        child = normalize(with_genes(one, p.genes))
        turn = child.prompt.turn
        assert p.note["panel"] in turn and turn.index(p.note["panel"]) < turn.index("experience")
        p = ops.toggle_panel(inline, random.Random(s), CTX)
        child = normalize(with_genes(inline, p.genes))
        assert child.prompt.turn == inline.prompt.turn and getattr(child.memory, p.note["panel"]) is p.note["on"]


def test_mode_changes_are_coherent():
    for seed in _seeds():
        modes = set()
        for s in range(25):
            p = ops.change_mode(seed, random.Random(s), CTX)
            child = normalize(with_genes(seed, p.genes))
            old, new = p.note["mode"]
            assert old == seed.mode != new == child.mode
            modes.add(new)
            on = [x for x in PANELS if getattr(child.memory, x)]
            if new == "env_only":
                assert not on and not {"workspace_intro", "meta_actions"} & set(child.prompt.system)
            else:
                assert on and ops.MODE_INTRO[new] in child.prompt.system
                assert not (set(ops.MODE_INTRO.values()) - {ops.MODE_INTRO[new]}) & set(child.prompt.system)
            if new == "always_on":
                assert all(x in child.prompt.turn for x in on)
        assert modes == set(gene("mode").choices) - {seed.mode}


def test_block_operators_only_add_blocks_that_show_something_and_never_duplicate():
    react = load_harness("react")
    added = set()
    for s in range(80):
        p = ops.add_block(react, random.Random(s), CTX)
        child = normalize(with_genes(react, p.genes))
        part, b = p.note["part"], p.note["block"]
        assert b in getattr(child.prompt, part) and b not in getattr(react.prompt, part)
        if b == "examples":
            assert child.prompt.text.examples == gene("prompt.text.examples").variant(p.note["variant"]) != ""
        added.add(b)
    # panels outside always_on, a note without a rewriting guard: they would show nothing
    assert not added & {"belief", "progress", "experience", "guard_note"}
    assert "examples" in added and "admissible" in added
    single = with_genes(react, {"prompt.system": ["role"]})
    for s in range(20):
        p = ops.drop_block(single, random.Random(s), CTX)
        assert p.note["part"] == "turn" and "prompt.system" not in p.genes
        m = ops.move_block(single, random.Random(s), CTX)
        assert m.note["part"] == "turn" and sorted(m.genes["prompt.turn"]) == sorted(react.prompt.turn)
        assert m.genes["prompt.turn"] != react.prompt.turn


def test_the_reference_order_names_every_library_block():
    for part in blocks.PARTS:
        assert sorted(REFERENCE_ORDER[part]) == sorted(blocks.block_names(part))
    for seed in _seeds():  # the seeds follow it
        for part in blocks.PARTS:
            names = getattr(seed.prompt, part)
            assert names == sorted(names, key=REFERENCE_ORDER[part].index)


def test_text_swaps_use_the_library_variants():
    seen = set()
    for seed in _seeds():
        for s in range(15):
            p = ops.swap_text(seed, random.Random(s), CTX)
            (name, text), = p.genes.items()
            assert text == gene(name).variant(p.note["variant"]) != get(seed, name)
            seen.add(name)
    assert seen == {"prompt.text.instruction", "prompt.text.reply_format"}  # no seed shows examples


def _is_ox(child: list[str], segment: list[str], second: list[str]) -> bool:
    """`segment` sits whole in `child`, and the other names are `second`'s, in its order."""
    k = len(segment)
    return (any(child[i:i + k] == segment for i in range(len(child) - k + 1))
            and [n for n in child if n not in segment] == [n for n in second if n not in segment]
            and set(child) == set(segment) | set(second))


def test_ordered_crossover_keeps_a_segment_and_the_other_order_without_duplicates():
    rng = random.Random(4)
    names = list("abcdefghij")
    for _ in range(300):
        first = rng.sample(names, rng.randint(1, 8))
        second = rng.sample(names, rng.randint(0, 8))
        child = ordered_blocks(first, second, rng)
        assert len(child) == len(set(child)) and set(second) <= set(child) <= set(first) | set(second)
        assert any(_is_ox(child, first[i:j], second) for i in range(len(first)) for j in range(i + 1, len(first) + 1))


def test_invalid_tries_are_counted_and_never_returned():
    proposals = []

    def wild(parent, rng, ctx):
        v = rng.choice([201, 500, 9, -1])
        proposals.append(v)
        return Proposal({"memory.history_window": v})

    reg = Registry().register("wild", wild)
    react = load_harness("react")
    for s in range(10):
        proposals.clear()
        child, invalid = mutate(react, random.Random(s), reg)
        assert child.harness.memory.history_window == 9 and proposals[-1] == 9
        assert invalid == len(proposals) - 1 == sum(v != 9 for v in proposals)
    with pytest.raises(VariationError, match="in 20 tries \\(20 invalid, 0 without effect\\)"):
        mutate(react, random.Random(0), Registry().register("bad", lambda p, r, c: Proposal({"guard": "maybe"})))
    with pytest.raises(VariationError, match="in 5 tries \\(0 invalid, 5 without effect\\)"):
        mutate(react, random.Random(0), Registry().register("same", lambda p, r, c: Proposal({"guard": "none"})),
               attempts=5)
    seq = iter([8, 8, 8, 3])
    c, invalid = mutate(react, random.Random(0),
                        Registry().register("slow", lambda p, r, c: Proposal({"memory.history_window": next(seq)})))
    assert invalid == 0 and c.detail["no_op_tries"] == 3 and c.detail["genes"] == {"memory.history_window": [8, 3]}
    with pytest.raises(VariationError, match="no mutation operator applies"):
        mutate(react, random.Random(0), Registry().register("never", lambda p, r, c: None))
    with pytest.raises(TypeError, match="not a Proposal"):
        mutate(react, random.Random(0), Registry().register("oops", lambda p, r, c: {"guard": "reject"}))


def test_an_invalid_crossover_child_is_retried_and_counted():
    calls = []

    def clash(a, b, rng, ctx):
        calls.append(1)
        bad = len(calls) < 3
        return (Proposal({"mode": "inline", "memory.belief": False, "memory.progress": False,
                          "memory.experience": False} if bad else {"model.max_tokens": 300}),
                Proposal({"model.max_tokens": 100}))

    a, b = load_harness("bpe_always_on"), load_harness("react")
    c1, c2, invalid = crossover(a, b, random.Random(0), Registry().register("clash", clash, kind="crossover"))
    assert invalid == 2 and c1.harness.model.max_tokens == 300 and c2.harness.model.max_tokens == 100
    assert c1.parents == (a.behaviour_id, b.behaviour_id) and c2.parents == (b.behaviour_id, a.behaviour_id)
    with pytest.raises(VariationError, match="behave alike"):
        crossover(a, a.evolve(name="twin"), random.Random(0))
    near = with_genes(a, {"model.max_tokens": 300})  # one gene apart: no two new children
    with pytest.raises(VariationError):
        crossover(a, near, random.Random(0))


def test_the_registry_is_a_value_and_operators_may_be_async():
    reg = DEFAULT.register("numeric", ops.numeric_step, weight=5.0)
    assert [o.weight for o in reg.operators if o.name == "numeric"] == [5.0]
    assert [o.weight for o in DEFAULT.operators if o.name == "numeric"] == [2.0]  # DEFAULT unchanged
    assert "text" not in DEFAULT.without("text").names() and "text" in DEFAULT.names()
    assert DEFAULT.names("crossover") == ["uniform", "ordered"]
    for bad in [dict(kind="selection"), dict(weight=0), dict(weight=float("inf"))]:
        with pytest.raises(ValueError):
            Registry().register("x", ops.numeric_step, **bad)

    async def reflect(parent, rng, ctx):
        await asyncio.sleep(0)
        return Proposal({"prompt.text.instruction": ctx.evidence["text"]}, {"from": "evidence"})

    areg = Registry().register("reflect", reflect)
    ctx = OperatorContext(generation=3, evidence={"text": "Look everywhere once."})
    child, invalid = asyncio.run(amutate(load_harness("react"), random.Random(0), areg, ctx))
    assert child.harness.prompt.text.instruction == "Look everywhere once." and child.detail["from"] == "evidence"
    with pytest.raises(TypeError, match="async"):
        mutate(load_harness("react"), random.Random(0), areg, ctx)


def test_random_harness_is_a_valid_walk_from_a_seed():
    seeds = _seeds()
    ids = {h.behaviour_id for h in seeds}
    first = [random_harness(random.Random(s), seeds) for s in range(8)]
    again = [random_harness(random.Random(s), seeds) for s in range(8)]
    assert [c.harness.id for c, _ in first] == [c.harness.id for c, _ in again]
    assert len({c.harness.behaviour_id for c, _ in first}) == 8
    for child, invalid in first:
        assert child.operator == "random" and child.parents[0] in ids and len(child.detail["steps"]) == 12
        seed = next(h for h in seeds if h.behaviour_id == child.parents[0])
        assert child.detail["seed"] == seed.name
        again_h = Harness.from_yaml(child.harness.to_yaml())
        assert again_h.behaviour_id == child.harness.behaviour_id and normalize(child.harness) == child.harness
    c0, _ = random_harness(random.Random(0), seeds, steps=0)
    assert c0.harness.behaviour_id == c0.parents[0] and c0.detail["genes"] == {}
    with pytest.raises(ValueError):
        random_harness(random.Random(0), [])


def test_a_mutation_after_a_crossover_keeps_the_crossover_lineage():
    a, b = load_harness("bpe_always_on"), load_harness("react")
    rng = random.Random(1)
    c1, _, _ = crossover(a, b, rng)
    m, _ = mutate(c1.harness, rng)
    both = m.after(c1)
    assert both.parents == c1.parents and both.operator == f"{c1.operator}+{m.operator}"
    assert both.detail["genes"] == {k: [x, y] for k, (x, y) in changed_genes(a, m.harness).items()}


def test_a_chain_of_mutations_is_one_child_of_the_parent():
    react = load_harness("react")
    base = normalize(react)
    sizes = []
    for s in range(12):
        child, _ = mutate(react, random.Random(s), steps=3)
        again, _ = mutate(react, random.Random(s), steps=3)
        assert child.harness.behaviour_id == again.harness.behaviour_id  # the same rng, the same chain
        assert child.parents == (base.behaviour_id,) and child.harness.behaviour_id != base.behaviour_id
        assert len(child.detail["steps"]) >= 3 and child.operator == "+".join(child.detail["steps"])
        assert child.detail["genes"] == {k: [x, y] for k, (x, y) in changed_genes(base, child.harness).items()}
        sizes.append(len(child.detail["genes"]))
        one, _ = mutate(react, random.Random(s))
        assert "steps" not in one.detail and "+" not in one.operator
    assert max(sizes) >= 3  # a chain changes several genes (single mutations change one or two)
    with pytest.raises(ValueError):
        mutate(react, random.Random(0), steps=0)


# --- the toolbox ---------------------------------------------------------------------------------------------
def test_settings_are_validated_with_one_line_messages():
    build_toolbox(SearchSettings(), random.Random(0))
    build_toolbox(SearchSettings(objectives=("success",), population=2, elite=1), random.Random(0))
    for bad, why in [(dict(population=3), "NSGA-II over success,tokens,meta needs a population of at least 4"),
                     (dict(objectives=("success", "speed")), "unknown objective"),
                     (dict(objectives=("tokens",)), "name 'success'"),
                     (dict(objectives=("success", "tokens", "tokens")), "each objective once"),
                     (dict(objectives=("success", "tokens", "cost", "meta")), "at most 3"),
                     (dict(objectives=("success",), population=2, elite=2), "elite"),
                     (dict(tournament_size=0), "tournament_size"),
                     (dict(crossover_prob=1.5), "crossover_prob"),
                     (dict(population=4.0), "whole number"),
                     (dict(mutation_steps=0), "mutation_steps")]:
        with pytest.raises(SearchConfigError, match=why) as e:
            build_toolbox(SearchSettings(**bad), random.Random(0))
        assert "\n" not in str(e.value) and isinstance(e.value, (ValueError, HarnevoError))


def test_fitness_values_negate_the_costs():
    stats = {"success": 0.75, "ci95": [0.6, 0.85], "games": 40, "tokens_per_episode": 1200.0,
             "cost_per_episode": 0.002, "meta_per_episode": 1.5}
    assert fitness_values(["success"], stats) == (0.75,)
    assert fitness_values(["success", "tokens", "meta"], stats) == (0.75, -1200.0, -1.5)
    assert fitness_values(["success", "cost"], stats) == (0.75, -0.002)
    with pytest.raises(SearchConfigError, match="meta_per_episode"):
        fitness_values(["success", "meta"], {"success": 0.5})


TOY = {"a": (0.9, -100.0), "b": (0.8, -50.0), "c": (0.5, -10.0),  # the front
       "d": (0.8, -120.0), "f": (0.5, -20.0),  # second front (d < a, f < c)
       "e": (0.4, -60.0), "g": (0.3, -200.0)}  # third and below


def test_nsga2_keeps_the_non_dominated_and_does_not_depend_on_input_order():
    tb = build_toolbox(SearchSettings(objectives=("success", "tokens"), population=4), random.Random(0))
    assert front_ids(TOY) == ["a", "b", "c"]
    ids = list(TOY)
    for s in range(5):
        random.Random(s).shuffle(ids)
        assert set(tb.select(ids, TOY, 3)) == {"a", "b", "c"}
        assert set(tb.select_survivors(ids, TOY, 5)) == {"a", "b", "c", "d", "f"}
        assert tb.select_survivors(ids, TOY, 5) == tb.select_survivors(sorted(ids), TOY, 5)
    assert sorted(tb.select_survivors(ids + ids, TOY, 50)) == sorted(TOY)  # distinct, at most all
    picks = Counter(tb.select_parents(ids, TOY, 700))
    assert set(picks) <= set(TOY) and sum(picks.values()) == 700
    assert min(picks[k] for k in "abc") > max(picks[k] for k in "eg")  # the front wins tournaments
    again = build_toolbox(SearchSettings(objectives=("success", "tokens"), population=4), random.Random(0))
    fresh = build_toolbox(SearchSettings(objectives=("success", "tokens"), population=4), random.Random(0))
    assert again.select_parents(ids, TOY, 50) == fresh.select_parents(ids, TOY, 50)


def test_tournament_with_elitism_keeps_the_elite():
    fit = {f"h{i:02d}": (i / 20,) for i in range(12)}
    fit["h00"] = (0.55,)  # ties with h11 for the top
    for s in range(30):
        chosen = elitist_survivors(list(fit), fit, 5, random.Random(s), size=3, elite=2)
        assert chosen[:2] == ["h00", "h11"] and len(set(chosen)) == 5  # tie broken by id
    tb = build_toolbox(SearchSettings(objectives=("success",), population=6, elite=2), random.Random(1))
    assert tb.select(list(fit), fit, 6)[:2] == ["h00", "h11"]
    seeds = _seeds()
    hfit = {h.behaviour_id: (s,) for h, s in zip(seeds, (0.5, 0.9, 0.7))}
    got = tb.select_parents(seeds, hfit, 40)
    assert all(isinstance(h, Harness) for h in got)
    assert Counter(h.name for h in got).most_common(1)[0][0] == "bpe_always_on"
    keys = list(fit)
    assert tournament(keys, fit, 5, random.Random(0), size=1) != tournament(keys, fit, 5, random.Random(1), size=1)
    with pytest.raises(ValueError, match="no fitness"):
        tb.select(["nope"], fit, 1)


def test_best_of_prefers_full_evaluations_then_success_then_cheapness():
    def st(success, games, tokens=1000.0, cost=0.0, meta=0.0):
        return {"success": success, "ci95": [0, 1], "games": games, "tokens_per_episode": tokens,
                "cost_per_episode": cost, "meta_per_episode": meta}

    assert best_of({"lucky": st(1.0, 3), "solid": st(0.9, 140), "weak": st(0.5, 140)}) == "solid"
    assert best_of({"x": st(0.8, 40, tokens=900), "y": st(0.8, 40, tokens=800), "z": st(0.79, 40, tokens=10)}) == "y"
    assert best_of({"x": st(0.8, 40), "y": st(0.8 + 1e-12, 40, tokens=1001)}) == "x"  # within 1e-9: a tie
    assert best_of({"x": st(0.8, 40, meta=2.0), "y": st(0.8, 40, meta=1.0)}) == "y"
    assert best_of({"b": st(0.8, 40), "a": st(0.8, 40)}) == "a"
    with pytest.raises(ValueError):
        best_of({})
    with pytest.raises(ValueError, match="no candidate"):
        best_of({"x": st(0.0, 0)})


def test_front_of_individuals_by_named_objectives():
    seeds = _seeds()
    stats = [{"success": 0.5, "tokens_per_episode": 500.0, "cost_per_episode": 0.0, "meta_per_episode": 0.0},
             {"success": 0.8, "tokens_per_episode": 900.0, "cost_per_episode": 0.0, "meta_per_episode": 0.0},
             {"success": 0.7, "tokens_per_episode": 950.0, "cost_per_episode": 0.0, "meta_per_episode": 4.0}]
    inds = [Individual(h, 1).evaluated(["success"], s) for h, s in zip(seeds, stats)]
    assert [i.harness.name for i in front(inds, ["success", "tokens"])] == ["bpe_always_on", "react"]
    assert [i.harness.name for i in front(inds, ["success"])] == ["bpe_always_on"]
    tb = build_toolbox(SearchSettings(objectives=("success",), population=3, elite=1), random.Random(0))
    assert tb.select(inds, None, 1)[0].harness.name == "bpe_always_on"  # fitness read from the individuals
    with pytest.raises(ValueError, match="not been evaluated"):
        tb.select([Individual(seeds[0], 1)], None, 1)


def test_individuals_pickle_even_in_a_fresh_process():
    tb = build_toolbox(SearchSettings(), random.Random(0))
    child, _ = tb.mutate(load_harness("bpe_inline"))
    ind = tb.individual(child.harness, origin=child)
    ind.evaluated(tb.objectives, {"success": 0.6, "tokens_per_episode": 1500.0, "meta_per_episode": 2.0})
    ind.fitness.crowding_dist = 0.25
    back = pickle.loads(pickle.dumps(ind))
    assert back.harness == ind.harness and back.fitness.values == (0.6, -1500.0, -2.0)
    assert back.fitness.crowding_dist == 0.25 and back.origin == child and back.stats == ind.stats
    assert type(back.fitness) is type(ind.fitness) and back.fitness.weights == (1.0, 1.0, 1.0)
    assert not pickle.loads(pickle.dumps(tb.individual(child.harness))).fitness.valid
    code = ("import pickle, sys; ind = pickle.loads(sys.stdin.buffer.read()); "
            "print(ind.behaviour_id, ind.fitness.values, type(ind.fitness).__name__, ind.origin.operator)")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(ind), capture_output=True, check=True)
    assert out.stdout.decode().split(None, 1) == [ind.behaviour_id,
                                                  f"(0.6, -1500.0, -2.0) FitnessHarness3 {child.operator}\n"]


def test_toolbox_variation_gives_new_children_with_their_lineage():
    tb = build_toolbox(SearchSettings(crossover_prob=1.0, mutation_prob=1.0), random.Random(2))
    seeds = _seeds()
    children, invalid = tb.vary([seeds[1], seeds[0], seeds[2]])
    assert len(children) == 3 and invalid >= 0
    assert "+" in children[0].operator and children[0].parents == (seeds[1].behaviour_id, seeds[0].behaviour_id)
    assert children[2].parents == (seeds[2].behaviour_id,)
    for c in children:
        assert Harness.from_yaml(c.harness.to_yaml()).behaviour_id == c.harness.behaviour_id
    none, _ = build_toolbox(SearchSettings(crossover_prob=0.0, mutation_prob=0.0), random.Random(2)).vary(seeds)
    assert none == []  # neither crossed nor mutated: no new candidate
    c1, c2, _ = tb.mate(tb.individual(seeds[0]), seeds[1])
    assert c1.parents[0] == seeds[0].behaviour_id and isinstance(c2, Child)


def test_operator_errors_are_harnevo_errors():
    assert issubclass(VariationError, HarnevoError) and not issubclass(VariationError, HarnessError)
