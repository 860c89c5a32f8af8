"""Simulated agents (harnevo/models/sim/): unit tests on hand-written messages, the replies recorded from
the sim before it was split into a package (tests/data/sim_replies.json.xz), and one end-to-end check
against the real ALFWorld engine with the real harness renderer, seed templates and workspace."""

from __future__ import annotations

import asyncio
import json
import lzma
import re
import time
from pathlib import Path

import pytest

from harnevo.errors import ModelNotFoundError
from harnevo.models.base import Model, approx_tokens
from harnevo.models.sim import make_sim, prompt_tokens, read_goal, read_messages

SYSTEM = "You are an agent in a household. Reply with 'Think: <thought>' and 'Action: <command>'."
SYSTEM_META = SYSTEM + """
Besides game commands you have four meta-actions:
  track [query]     show your Belief
  commit [subgoal]  mark a subgoal as done
  recall [query]    show lessons from earlier episodes
  note [insight]    keep a lesson for later episodes
"""
ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
        "a countertop 1, a diningtable 1, a fridge 1, a garbagecan 1, a microwave 1, and a sinkbasin 1.")


def turn(task: str, history: list[tuple[str, str]] | None = None, obs: str | None = None, *,
         belief: str | None = None, admissible: list[str] | None = None, extra: str = "",
         system: str = SYSTEM, step: int | None = None) -> list[dict]:
    parts = [f"## Task\nYour task is to: {task}", f"## Room\n{ROOM}"]
    if history:
        parts.append(f"## History (last {len(history)} steps)\n" + "\n".join(f"> {a}\n{o}" for a, o in history))
    if belief:
        parts.append(f"## Belief\n{belief}")
    if extra:
        parts.append(extra)
    parts.append("## Observation\n" + (obs if obs is not None else (history[-1][1] if history else ROOM)))
    if admissible:
        parts.append("## Admissible actions\n" + " | ".join(admissible))
    if step is not None:
        parts.append(f"Step {step} of 50. Your reply:")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def act(messages: list[dict], spec: str = "sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1", sample: int = 0) -> str:
    reply = asyncio.run(make_sim(spec).complete(messages, sample=sample))
    m = re.findall(r"^Action:\s*(.*)$", reply.text, re.M)
    return m[-1].strip() if m else ""


def test_contract_and_usage():
    model = make_sim("sim/bounded")
    assert isinstance(model, Model) and model.simulated and model.name == "sim/bounded"
    msgs = turn("put a apple in fridge.")
    reply = asyncio.run(model.complete(msgs))
    assert reply.text == model.decide(msgs).text  # complete() is decide() plus usage and timing
    assert re.fullmatch(r"Think: [^\n]+\nAction: [a-z][^\n]*", reply.text), reply.text
    assert reply.usage.prompt_tokens == sum(approx_tokens(m["content"]) for m in msgs) == prompt_tokens(msgs)
    assert reply.usage.completion_tokens == approx_tokens(reply.text) and reply.usage.cost_usd == 0
    assert 0 < reply.latency_s < 1.0
    asyncio.run(model.aclose())


def test_goal_parsing():
    cases = {
        "put a clean apple in fridge.": ("clean", "apple", "fridge"),
        "clean some apple and put it in fridge.": ("clean", "apple", "fridge"),
        "heat some egg and put it in countertop.": ("heat", "egg", "countertop"),
        "put a hot potato in diningtable.": ("heat", "potato", "diningtable"),
        "cool some bread and put it in countertop.": ("cool", "bread", "countertop"),
        "put a cool mug in cabinet.": ("cool", "mug", "cabinet"),
        "put two cd in safe.": ("pick2", "cd", "safe"),
        "find two pillow and put them in sofa.": ("pick2", "pillow", "sofa"),
        "look at alarmclock under the desklamp.": ("look", "alarmclock", "desklamp"),
        "examine the cd with the desklamp.": ("look", "cd", "desklamp"),
        "put some spraybottle on toilet.": ("pick", "spraybottle", "toilet"),
        "put a knife in drawer.": ("pick", "knife", "drawer"),
    }
    for text, want in cases.items():
        g = read_goal(f"Your task is to: {text}")
        assert g is not None and (g.family, g.obj, g.target) == want, text


def test_goes_to_a_known_location():
    at_counter = "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a bread 1."
    hist = [("go to countertop 1", at_counter),
            ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is open. In it, you see a plate 1.")]
    assert act(turn("put a apple in fridge.", hist)) == "go to countertop 1"
    # once there, it takes the apple
    hist.append(("go to countertop 1", at_counter))
    assert act(turn("put a apple in fridge.", hist)) == "take apple 1 from countertop 1"


def test_opens_a_closed_receptacle():
    hist = [("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.")]
    assert act(turn("put a apple in countertop.", hist)) == "open fridge 1"
    # and to put something into a closed target
    hist = [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1."),
            ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1."),
            ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.")]
    assert act(turn("put a apple in fridge.", hist)) == "open fridge 1"
    hist.append(("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see nothing."))
    assert act(turn("put a apple in fridge.", hist)) == "move apple 1 to fridge 1"


def test_does_not_revisit_what_it_can_see_was_visited():
    belief = ("location: countertop 1\nholding: nothing\nopen: fridge 1\nseen:\n- countertop 1: bread 1\n"
              "- cabinet 1: nothing\n- cabinet 2: nothing\n- fridge 1: egg 1, potato 2\n- diningtable 1: cup 1\n"
              "- microwave 1: nothing\n- garbagecan 1: nothing\n"
              "not visited: sinkbasin 1")
    for sample in range(5):
        assert act(turn("put a apple in countertop.", belief=belief), sample=sample) == "go to sinkbasin 1"
    # the same knowledge from history, with seeds varying the tie-breaks
    seen = ["countertop 1", "cabinet 1", "cabinet 2", "fridge 1", "diningtable 1", "microwave 1"]
    hist = [(f"go to {r}", f"You arrive at {r}. On the {r}, you see nothing.") for r in seen]
    for sample in range(5):
        a = act(turn("put a apple in countertop.", hist), sample=sample)
        assert a.startswith("go to ") and a[6:] not in seen, a
    # a belief panel that lists where the object is: straight to it
    belief2 = belief.replace("- diningtable 1: cup 1", "- diningtable 1: apple 3, cup 1")
    assert act(turn("put a apple in countertop.", belief=belief2)) == "go to diningtable 1"


def test_uses_the_admissible_list():
    adm = ["go to cabinet 1", "go to cabinet 2", "go to countertop 1", "go to diningtable 1", "go to fridge 1",
           "go to garbagecan 1", "go to microwave 1", "go to sinkbasin 1", "inventory", "look"]
    for sample in range(10):
        assert act(turn("heat some egg and put it in countertop.", admissible=adm), sample=sample) in adm
    # at countertop 1 (it is missing from the go-to list) holding the apple: put it there
    hist = [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1.")]
    adm2 = [a for a in adm if a != "go to countertop 1"] + ["take apple 1 from countertop 1", "examine countertop 1"]
    assert act(turn("put a apple in fridge.", hist, admissible=adm2)) == "take apple 1 from countertop 1"
    # lapses with an admissible list are admissible actions or malformed commands, never silence about it
    outs = [act(turn("put a apple in fridge.", hist, admissible=adm2), "sim/bounded?lapse=1&per_1k_tokens=0&forget_per_1k=0", s)
            for s in range(40)]
    assert sum(o in adm2 for o in outs) >= 8 and sum(o not in adm2 for o in outs) >= 8


def test_deterministic_for_the_same_messages():
    msgs = turn("put a apple in fridge.", [("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.")])
    spec = "sim/bounded?lapse=0.5&per_1k_tokens=0.02&forget_per_1k=0&seed=3"
    a = [asyncio.run(make_sim(spec).complete(msgs, sample=s)).text for s in range(20)]
    b = [asyncio.run(make_sim(spec).complete(msgs, sample=s)).text for s in range(20)]
    assert a == b
    assert len(set(a)) > 1  # samples differ (lapse draws)
    c = [asyncio.run(make_sim(spec.replace("seed=3", "seed=4")).complete(msgs, sample=s)).text for s in range(20)]
    assert c != a


def test_lapse_rate_grows_with_prompt_length():
    hist = [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1.")]
    short = turn("put a apple in fridge.", hist)
    filler = "## Experience\n" + "\n".join(f"- lesson {i}: keep calm and look in every cabinet {i}."
                                           for i in range(700))
    long = turn("put a apple in fridge.", hist, extra=filler)
    n = 300

    def rate(msgs):
        model = make_sim("sim/bounded?lapse=0.05&per_1k_tokens=0.02&forget_per_1k=0&knowledge=1")
        want = act(msgs, "sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1")
        return sum(act(msgs, model.name, sample=s) != want for s in range(n)) / n, model.p_lapse(msgs)

    r_short, p_short = rate(short)
    r_long, p_long = rate(long)
    assert p_short < 0.07 and p_long > 0.2
    assert abs(r_short - p_short) < 0.05 and abs(r_long - p_long) < 0.1
    assert r_long > r_short + 0.15


def test_forgetting_far_facts_is_optional():
    # the apple was seen long ago; with forget_per_1k the agent sometimes overlooks it, never without
    hist = [("go to garbagecan 1", "You arrive at garbagecan 1. On the garbagecan 1, you see a apple 1.")]
    hist += [(f"go to cabinet {i % 2 + 1}", f"You arrive at cabinet {i % 2 + 1}. On the cabinet {i % 2 + 1}, "
              "you see nothing.") for i in range(40)]
    msgs = turn("put a apple in fridge.", hist)
    base = {act(msgs, "sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1", s) for s in range(20)}
    assert base == {"go to garbagecan 1"}
    outs = [act(msgs, "sim/bounded?lapse=0&per_1k_tokens=0&knowledge=1&forget_per_1k=1", s) for s in range(40)]
    assert 0 < outs.count("go to garbagecan 1") < 40


def test_meta_actions_when_offered():
    task = "put a apple in fridge."
    # start of an episode: recall
    assert act(turn(task, system=SYSTEM_META)).startswith("recall apple")
    # no meta-actions offered: never one
    assert not act(turn(task)).split(" ")[0] in ("recall", "track", "commit", "note")
    # history window hides steps (step 20, 2 entries visible), no belief: track before searching
    hist = [("go to cabinet 1", "You arrive at cabinet 1. On the cabinet 1, you see nothing."),
            ("go to cabinet 2", "You arrive at cabinet 2. On the cabinet 2, you see nothing.")]
    assert act(turn(task, hist, system=SYSTEM_META, step=20)) == "track apple"
    # ... but not when the whole history is visible
    assert act(turn(task, hist, system=SYSTEM_META, step=3)).startswith("go to ")
    # a track result is read like a belief panel
    tracked = hist + [("track apple", "location: cabinet 2\nholding: nothing\nopen: none\nseen:\n"
                                      "- diningtable 1: apple 2\nnot visited: sinkbasin 1")]
    assert act(turn(task, tracked, system=SYSTEM_META, step=21)) == "go to diningtable 1"
    # after taking the goal object: commit it (once)
    took = [("go to diningtable 1", "You arrive at diningtable 1. On the diningtable 1, you see a apple 2."),
            ("take apple 2 from diningtable 1", "You pick up the apple 2 from the diningtable 1.")]
    assert act(turn(task, took, system=SYSTEM_META, step=3)) == "commit took apple 2"
    took.append(("commit took apple 2", "Progress:\n- [done] took apple 2"))
    assert act(turn(task, took, system=SYSTEM_META, step=4)) == "go to fridge 1"


def test_bad_names():
    for bad in ("sim/nope", "sim/bounded?lapse=abc", "sim/bounded?foo=1", "sim/bounded?lapse=2", "bounded",
                "sim/random?ms=3", "sim/latency?ms=-1"):
        with pytest.raises(ModelNotFoundError) as e:
            make_sim(bad)
        assert "\n" not in str(e.value)
    assert make_sim("sim/bounded?lapse=0.1&per_1k_tokens=0&seed=7").seed == 7


def test_random_and_latency():
    adm = ["go to cabinet 1", "go to fridge 1", "look"]
    msgs = turn("put a apple in fridge.", admissible=adm)
    outs = {act(msgs, "sim/random?seed=1", sample=s) for s in range(20)}
    assert outs <= set(adm) and len(outs) > 1
    assert act(turn("put a apple in fridge."), "sim/random") == "look"
    model = make_sim("sim/latency?ms=50&lapse=0")
    t0 = time.perf_counter()
    reply = asyncio.run(model.complete(msgs))
    assert time.perf_counter() - t0 >= 0.045 and reply.latency_s >= 0.045
    # sim/latency is sim/bounded with a wait: the same reply for the same parameters
    assert reply.text == make_sim("sim/bounded?lapse=0").decide(msgs).text


def test_reads_only_visible_text():
    # what it reads from the messages, not from anywhere else
    v = read_messages(turn("put a apple in fridge.",
                           [("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
                            ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.")]))
    assert v.world.location == "fridge 1" and v.world.where == {"egg 1": "fridge 1"}
    assert v.world.closed["fridge 1"] is False and "fridge 1" in v.world.searched
    assert len(v.world.receptacles) == 8


# --------------------------------------------------------------------------------------------------------
# The same replies as before the split
# --------------------------------------------------------------------------------------------------------
REPLIES = Path(__file__).resolve().parent / "data" / "sim_replies.json.xz"


def test_replies_match_the_recorded_ones():
    """628 real turn messages (three seed harnesses, 18 official games, multi-turn chats among them) and
    the replies of six sim settings to them, recorded from the single-module sim before the split (see
    tests/data/make_sim_replies.py). The sim must still give exactly these replies."""
    data = json.loads(lzma.decompress(REPLIES.read_bytes()))
    records = data["records"]
    assert len(records) == 628 and {r["spec"] for r in records[0]["replies"]} >= {"sim/bounded", "sim/random?seed=3"}
    differ = []
    for i, rec in enumerate(records):
        assert prompt_tokens(rec["messages"]) == rec["prompt_tokens"], i
        for want in rec["replies"]:
            d = make_sim(want["spec"]).decide(rec["messages"], want["sample"])
            got = {"text": d.text, "action": d.action, "planned": d.planned, "lapsed": d.lapsed,
                   "p_lapse": d.p_lapse, "completion_tokens": approx_tokens(d.text)}
            if any(got[k] != want[k] for k in got):
                differ.append((i, want["spec"], want["sample"], want["text"], d.text))
    assert not differ, f"{len(differ)} replies differ from {REPLIES.name}; first: {differ[0]}"


# --------------------------------------------------------------------------------------------------------
# End to end with the real engine, the real renderer, the seed templates and the real workspace
# --------------------------------------------------------------------------------------------------------
def _template_sources(h) -> dict[str, str]:
    sources = getattr(h, "template_sources", None)  # block-form harnesses assemble their templates
    return sources() if callable(sources) else dict(h.templates)


def _play(h, model, game_file: str) -> tuple[bool, int]:
    """One game, turn by turn as the evaluator plays it: render the seed's templates on the documented
    context (harnevo/harness/render.py), ask the model, parse, guard, step the engine, update the
    workspace. Returns (won, steps)."""
    from harnevo.envs.alfworld import make_env, reset, step
    from harnevo.harness.experience import ExperienceBank
    from harnevo.harness.guard import guard
    from harnevo.harness.parse import parse_reply
    from harnevo.harness.render import Renderer
    from harnevo.harness.task import parse_task_goal, split_first_observation
    from harnevo.harness.workspace import Workspace

    renderer = Renderer(_template_sources(h))
    env = make_env(game_file)
    try:
        first = reset(env)
        room, task = split_first_observation(first.text)
        ws = Workspace.start(h.memory, parse_task_goal(task), room, ExperienceBank(None, size=5))
        observation, last_action, admissible = room, "", list(first.admissible)
        history: list[dict[str, str]] = []
        for n in range(h.budget.max_steps):
            window = h.memory.history_window
            ctx = {"task": task, "room": room, "observation": observation, "last_action": last_action,
                   "admissible": admissible, "history": history[:-1][-window:] if window else [],
                   "step": n + 1, "max_steps": h.budget.max_steps, "steps_left": h.budget.max_steps - n,
                   "mode": h.mode, "meta_actions": [], "guard_note": "", **ws.panels(h.mode)}
            reply = asyncio.run(model.complete(renderer.messages(ctx)))
            action = guard(h.guard, parse_reply(reply.text).action or "", admissible).action
            assert action, reply.text
            o = step(env, action)
            ws.observe(o.text)
            observation, last_action, admissible = o.text, action, list(o.admissible)
            history.append({"action": action, "observation": o.text})
            if o.won:
                return True, n + 1
        return False, h.budget.max_steps
    finally:
        env.close()


def test_end_to_end_wins_real_games(alfworld_data):
    pytest.importorskip("alfworld")
    from harnevo.envs.games import scan_split
    from harnevo.harness.spec import load_harness

    games = scan_split(alfworld_data, "valid_seen")
    picked = [next(g for g in games if g.family == f) for f in ("pick", "clean", "heat", "look")]
    h = load_harness("bpe_always_on").evolve(budget={"max_steps": 30})
    model = make_sim("sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1")
    results = {g.name: _play(h, model, g.path) for g in picked}
    # a lapse-free sim that knows where things usually are, shown every panel, wins each of these
    assert all(won for won, _ in results.values()), results
    assert sum(steps for _, steps in results.values()) <= 35, results  # 25 (4 + 7 + 11 + 3) measured
