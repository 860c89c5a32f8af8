"""The harness as a program: strict schema, sandboxed templates, identity, parsing, guards, workspace."""

from __future__ import annotations

import json

import pytest

from harnevo.errors import HarnessError
from harnevo.harness.belief import Belief, split_items
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.guard import guard
from harnevo.harness.parse import parse_reply
from harnevo.harness.spec import Harness, load_harness, seed_names
from harnevo.harness.task import parse_goal, split_first_observation
from harnevo.harness.workspace import Workspace

SEEDS = ["bpe_always_on", "bpe_inline", "react"]


def _yaml_of(name: str) -> str:
    return load_harness(name).to_yaml()


def test_seeds_load_and_ids_are_stable():
    assert set(SEEDS) <= set(seed_names())
    ids = {load_harness(n).id for n in SEEDS}
    assert len(ids) == 3
    h = load_harness("react")
    again = Harness.from_yaml(h.to_yaml())
    assert again.id == h.id and again == h


def test_id_changes_with_any_field():
    h = load_harness("react")
    assert h.evolve(memory={"history_window": 9}).id != h.id
    assert h.evolve(guard="reject").id != h.id
    assert h.evolve(memory={"history_window": 8}).id == h.id


def test_unknown_key_names_the_field(tmp_path):
    text = _yaml_of("react") + "colour: blue\n"
    with pytest.raises(HarnessError, match="unknown field 'colour'"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("history_window: 8", "history_window: 8\n  histroy: 3")
    with pytest.raises(HarnessError, match="memory.histroy"):
        Harness.from_yaml(text)


def test_wrong_type_names_the_field():
    text = _yaml_of("react").replace("history_window: 8", "history_window: eight")
    with pytest.raises(HarnessError, match="memory.history_window"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("guard: none", "guard: maybe")
    with pytest.raises(HarnessError, match="guard"):
        Harness.from_yaml(text)


def test_malformed_yaml_and_missing_template():
    with pytest.raises(HarnessError, match="not valid YAML"):
        Harness.from_yaml("name: [unclosed\n")
    with pytest.raises(HarnessError, match="missing template"):
        Harness.from_yaml("name: x\ntemplates:\n  system: hi\n")
    with pytest.raises(HarnessError, match="mapping"):
        Harness.from_yaml("- a\n- b\n")


@pytest.mark.parametrize("evil", [
    "{{ task.__class__ }}",
    "{{ task.__class__.__mro__[1].__subclasses__() }}",
    "{{ (task|attr('__class__')) }}",
    "{{ history.append(1) }}",
])
def test_template_cannot_reach_python_internals(evil):
    data = load_harness("react").model_dump()
    data["templates"]["turn"] = evil
    with pytest.raises(HarnessError, match="unsafe|turn"):
        Harness.from_dict(data)


def test_undefined_name_in_template_is_an_error():
    data = load_harness("react").model_dump()
    data["templates"]["turn"] = "{{ no_such_thing }}"
    with pytest.raises(HarnessError, match="no_such_thing"):
        Harness.from_dict(data)


def test_unknown_seed_and_missing_file(tmp_path):
    with pytest.raises(HarnessError, match="unknown harness 'nope'"):
        load_harness("nope")
    with pytest.raises(HarnessError, match="not found"):
        load_harness(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize("reply,action", [
    ("Think: go.\nAction: go to desk 1", "go to desk 1"),
    ("  action:   Take Apple 1 from Countertop 1.  ", "take apple 1 from countertop 1"),
    ("> open fridge 1", "open fridge 1"),
    ("<think>hmm\nAction: look</think>\nAction: go to bed 1", "go to bed 1"),
    ('Action: "use desklamp 1"', "use desklamp 1"),
    ("**Action:** `examine desk 1`", "examine desk 1"),
    ("go to sofa 1", "go to sofa 1"),
])
def test_parse_reply_tolerant(reply, action):
    assert parse_reply(reply).action == action


def test_parse_meta_and_invalid():
    assert parse_reply("Action: track apple", meta_actions=True).meta == ("track", "apple")
    assert parse_reply("Action: track apple", meta_actions=False).action == "track apple"
    assert parse_reply("Action: commit took apple 1", meta_actions=True).meta == ("commit", "took apple 1")
    assert parse_reply("").error
    assert parse_reply("Think: I am unsure what to do here and I will think about it for a very long time "
                       "before deciding anything, since the room is large.\nThought: still thinking").error


def test_guards():
    adm = ["go to desk 1", "move apple 1 to fridge 1", "look"]
    assert guard("none", "go to desk 2", adm).action == "go to desk 2"
    r = guard("reject", "go to desk 2", adm)
    assert r.action is None and "not an admissible" in r.note
    assert guard("nearest_admissible", "put apple 1 in fridge 1", adm).action == "move apple 1 to fridge 1"
    assert guard("nearest_admissible", "go to desk", adm).action == "go to desk 1"
    assert guard("nearest_admissible", "xyzzy", adm).action == "xyzzy"


FIRST = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
         "you see a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
         "Your task is to: put a clean apple in fridge.")


def test_goal_parsing():
    room, task = split_first_observation(FIRST)
    assert task == "put a clean apple in fridge." and room.startswith("You are in the middle")
    cases = {
        "put a clean apple in fridge.": ("clean", "apple", "fridge"),
        "clean some apple and put it in fridge.": ("clean", "apple", "fridge"),
        "heat some egg and put it in garbagecan.": ("heat", "egg", "garbagecan"),
        "put a hot egg in countertop.": ("heat", "egg", "countertop"),
        "cool some pan and put it in stoveburner.": ("cool", "pan", "stoveburner"),
        "put two cellphone in sofa.": ("pick2", "cellphone", "sofa"),
        "find two pillow and put them in sofa.": ("pick2", "pillow", "sofa"),
        "look at alarmclock under the desklamp.": ("look", "alarmclock", "desklamp"),
        "examine the book with the desklamp.": ("look", "book", "desklamp"),
        "put some spraybottle on toilet.": ("pick", "spraybottle", "toilet"),
        "put a mug in coffeemachine.": ("pick", "mug", "coffeemachine"),
    }
    for text, (fam, obj, target) in cases.items():
        g = parse_goal(text)
        assert (g.family, g.obj, g.target) == (fam, obj, target), text


def test_belief_follows_observations():
    b = Belief()
    b.observe_room(split_first_observation(FIRST)[0])
    assert split_items("a apple 1, a bread 2, and a cup 1") == ["apple 1", "bread 2", "cup 1"]
    assert b.receptacles[0] == "cabinet 2" and len(b.receptacles) == 6
    b.observe("You arrive at countertop 1. On the countertop 1, you see a apple 1, and a bread 1.")
    b.observe("You arrive at fridge 1. The fridge 1 is closed.")
    assert b.contents["fridge 1"] is None
    b.observe("You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.")
    assert b.contents["fridge 1"] == ["egg 1"] and "fridge 1" in b.opened
    b.observe("You pick up the apple 1 from the countertop 1.")
    assert b.holding == ["apple 1"] and b.contents["countertop 1"] == ["bread 1"]
    b.observe("You clean the apple 1 using the sinkbasin 1.")
    b.observe("You move the apple 1 to the fridge 1.")
    assert b.holding == [] and "apple 1" in b.contents["fridge 1"] and b.states["apple 1"] == "clean"
    panel = b.render()
    assert "location: fridge 1" in panel and "- countertop 1: bread 1" in panel
    assert "not visited: cabinet 2, cabinet 1, microwave 1, sinkbasin 1" in panel


def test_workspace_meta_actions_and_experience(tmp_path):
    h = load_harness("bpe_inline")
    bank = ExperienceBank(tmp_path / "experience.json", size=3)
    room, task = split_first_observation(FIRST)
    ws = Workspace.start(h.memory, parse_goal(task), room, bank)
    assert ws.panels("inline") == {"belief": "", "progress": "", "experience": ""}
    ws.observe("You arrive at countertop 1. On the countertop 1, you see a apple 1, and a bread 1.")
    assert "- countertop 1: apple 1, bread 1" in ws.meta("track", "")
    assert "countertop 1" in ws.meta("track", "apple")
    ws.observe("You pick up the apple 1 from the countertop 1.")
    prog = ws.meta("commit", "")
    assert "[done] find apple" in prog and "[done] take apple" in prog and "[todo] clean apple" in prog
    assert "[done] clean apple" in ws.meta("commit", "cleaned the apple with sinkbasin")
    assert ws.meta("note", "apples are often on the countertop").startswith("Noted")
    ws.finish(won=True)
    bank.save()
    again = ExperienceBank(tmp_path / "experience.json", size=3)
    texts = [l.text for l in again.lessons]
    assert "apples are often on the countertop" in texts and "apple was found at a countertop" in texts
    assert "apples are often" in ws.meta("recall", "apple countertop")


def test_experience_bank_edits_and_cap(tmp_path):
    bank = ExperienceBank(tmp_path / "e.json", size=2)
    a = bank.add("open closed drawers")
    assert bank.add("Open closed drawers.") is a and a.support == 2  # merged
    b = bank.add("the desklamp is often on a desk")
    assert bank.update(b.id, "the desklamp is usually on a desk or sidetable")
    c = bank.add("microwaves heat")  # over the cap: the weakest goes
    assert len(bank.lessons) == 2 and a in bank.lessons
    assert bank.merge(a.id, c.id if c in bank.lessons else b.id, "open closed drawers and cabinets")
    assert bank.delete(a.id) and not bank.lessons
    bank.save()
    assert json.loads((tmp_path / "e.json").read_text())["lessons"] == []


def test_always_on_panels_render():
    h = load_harness("bpe_always_on")
    room, task = split_first_observation(FIRST)
    ws = Workspace.start(h.memory, parse_goal(task), room, ExperienceBank(None, size=5))
    panels = ws.panels("always_on")
    assert panels["belief"].startswith("location: start") and "[todo] find apple" in panels["progress"]
    assert ws.panels("env_only")["belief"] == ""


def test_family_filter_and_seeded_sample(alfworld_data):
    from harnevo.envs.games import load_games, parse_families
    from harnevo.errors import HarnevoError

    assert parse_families("heat, cool,heat") == ["heat", "cool"]
    assert parse_families("pick_two_obj_and_place") == ["pick2"]
    with pytest.raises(HarnevoError, match="unknown task family 'boil'"):
        parse_families("heat,boil")
    heat_cool = load_games("valid_seen", data=alfworld_data, families=["heat", "cool"])
    assert len(heat_cool) == 16 + 25 and {g.family for g in heat_cool} == {"heat", "cool"}
    a = load_games("valid_seen", data=alfworld_data, n=10, seed=4)
    assert a == load_games("valid_seen", data=alfworld_data, n=10, seed=4) == sorted(a)
    assert a != load_games("valid_seen", data=alfworld_data, n=10, seed=5)
