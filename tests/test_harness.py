"""The harness as a program: strict schema, loading, identity, sandboxed templates, workspace.
(Genome and prompt blocks: test_genome.py; render budgets: test_render_bounds.py; replies and guards:
test_parse_guard.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from harnevo.errors import HarnessError
from harnevo.harness.belief import Belief, split_items
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness, StepBudget, load_harness, seed_names
from harnevo.harness.task import parse_task_goal, split_first_observation
from harnevo.harness.workspace import Workspace

SEEDS = ["bpe_always_on", "bpe_inline", "react"]


def _yaml_of(name: str) -> str:
    return load_harness(name).to_yaml()


def _hand_written(name: str, **templates: str) -> dict:
    """A seed as a hand-written-templates harness mapping, with some templates replaced."""
    h = load_harness(name)
    data = h.model_dump(mode="json")
    data["prompt"] = None
    data["templates"] = {**h.template_sources(), **templates}
    return data


def _cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """Run `harnevo ARGS` in-process as the console script does; (exit code, stdout, stderr)."""
    from harnevo.cli import main

    monkeypatch.setattr(sys, "argv", ["harnevo", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out, err = capsys.readouterr()
    return e.value.code or 0, out, err


def test_seeds_load_and_ids_are_stable():
    assert set(SEEDS) <= set(seed_names())
    ids = {load_harness(n).id for n in SEEDS}
    assert len(ids) == 3
    for n in SEEDS:
        h = load_harness(n)
        again = Harness.from_yaml(h.to_yaml())
        assert again == h and again.id == h.id and again.behaviour_id == h.behaviour_id
        assert again.to_yaml() == h.to_yaml()
        assert hash(again) == hash(h) and len({h, again}) == 1


def test_yaml_round_trip_keeps_awkward_text():
    awkward = "line one  \n\ttabbed: {{ not jinja }}\n  'quoted' \"double\" \\ back\n\n\ntrailing\n"
    h = load_harness("react").evolve(prompt={"text": {"examples": awkward, "instruction": "a: b # c"}})
    again = Harness.from_yaml(h.to_yaml())
    assert again == h and again.prompt.text.examples == awkward and again.id == h.id
    hand = Harness.from_dict(_hand_written("react", turn="{{ task }}\n  kept  \n"))
    assert Harness.from_yaml(hand.to_yaml()) == hand and "prompt" not in hand.to_yaml()


def test_id_changes_with_any_field():
    h = load_harness("react")
    assert h.evolve(memory={"history_window": 9}).id != h.id
    assert h.evolve(guard="reject").id != h.id
    assert h.evolve(memory={"history_window": 8}).id == h.id
    assert h.evolve(name="renamed").id != h.id  # the full id covers the name; behaviour_id does not


def test_step_budget_and_integral_floats():
    h = load_harness("react")
    assert isinstance(h.budget, StepBudget)
    text = _yaml_of("react").replace("max_steps: 50", "max_steps: 50.0").replace("max_tokens: 256", "max_tokens: 256.0")
    again = Harness.from_yaml(text)
    assert again.budget.max_steps == 50 and type(again.budget.max_steps) is int and again.id == h.id
    with pytest.raises(HarnessError, match="budget.max_steps"):
        Harness.from_yaml(_yaml_of("react").replace("max_steps: 50", "max_steps: 50.5"))
    with pytest.raises(HarnessError, match="budget.max_steps"):
        Harness.from_yaml(_yaml_of("react").replace("max_steps: 50", "max_steps: 5000.0"))
    assert h.evolve(model={"temperature": 1}).model.temperature == 1.0


def test_unknown_key_names_the_field(tmp_path):
    text = _yaml_of("react") + "colour: blue\n"
    with pytest.raises(HarnessError, match="unknown field 'colour'"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("history_window: 8", "history_window: 8\n  histroy: 3")
    with pytest.raises(HarnessError, match="memory.histroy"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("    examples: ''", "    examples: ''\n    exampels: x")
    with pytest.raises(HarnessError, match="prompt.text.exampels"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("room, history", "room, histroy")
    with pytest.raises(HarnessError, match="unknown block 'histroy'"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("room, history", "room, room")
    with pytest.raises(HarnessError, match="listed twice: room"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("room, history", "role, history")  # a system block in the turn
    with pytest.raises(HarnessError, match="unknown block 'role'"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("      room: Room", "      room: |-\n        Two\n        lines")
    with pytest.raises(HarnessError, match="headers.room.*one line"):
        Harness.from_yaml(text)


def test_wrong_type_names_the_field():
    text = _yaml_of("react").replace("history_window: 8", "history_window: eight")
    with pytest.raises(HarnessError, match="memory.history_window"):
        Harness.from_yaml(text)
    text = _yaml_of("react").replace("guard: none", "guard: maybe")
    with pytest.raises(HarnessError, match="guard"):
        Harness.from_yaml(text)


def test_malformed_yaml_missing_template_and_both_forms():
    with pytest.raises(HarnessError, match="not valid YAML"):
        Harness.from_yaml("name: [unclosed\n")
    with pytest.raises(HarnessError, match="missing template"):
        Harness.from_yaml("name: x\ntemplates:\n  system: hi\n")
    with pytest.raises(HarnessError, match="mapping"):
        Harness.from_yaml("- a\n- b\n")
    with pytest.raises(HarnessError, match="exactly one of `prompt`"):
        Harness.from_yaml("name: x\n")
    both = {**_hand_written("react"), "prompt": load_harness("react").model_dump(mode="json")["prompt"]}
    with pytest.raises(HarnessError, match="exactly one of `prompt`"):
        Harness.from_dict(both)


@pytest.mark.parametrize("evil", [
    "{{ task.__class__ }}",
    "{{ task.__class__.__mro__[1].__subclasses__() }}",
    "{{ (task|attr('__class__')) }}",
    "{{ history.append(1) }}",
])
def test_template_cannot_reach_python_internals(evil):
    with pytest.raises(HarnessError, match="unsafe|turn"):
        Harness.from_dict(_hand_written("react", turn=evil))


def test_undefined_name_in_template_is_an_error():
    with pytest.raises(HarnessError, match="no_such_thing"):
        Harness.from_dict(_hand_written("react", turn="{{ no_such_thing }}"))


def test_unknown_seed_and_missing_file(tmp_path):
    with pytest.raises(HarnessError, match="unknown harness 'nope'"):
        load_harness("nope")
    with pytest.raises(HarnessError, match="not found"):
        load_harness(str(tmp_path / "missing.yaml"))


def _unreadable_cases(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp_path / "binary.yaml").write_bytes(b"name: x\x00\x01\x02\xff")
    (tmp_path / "dir.yaml").mkdir()
    (tmp_path / "empty.yaml").write_bytes(b"")
    (tmp_path / "blank.yaml").write_bytes(b"\n   \n# only a comment\n")
    (tmp_path / "huge.yaml").write_bytes(b"# " + b"x" * 1_100_000 + b"\n")
    (tmp_path / "nested.yaml").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "control.yaml").write_text("name: x\x07y\n")
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (tmp_path / "laughs.yaml").write_text("name: x\n" + laughs + "templates: *i\n")
    return {
        "latin1.yaml": "not UTF-8 text", "binary.yaml": "binary file", "dir.yaml": "is a directory",
        "empty.yaml": "empty", "blank.yaml": "empty", "huge.yaml": "at most 1000000 bytes",
        "nested.yaml": "not valid YAML", "control.yaml": "not valid YAML", "laughs.yaml": "field 'templates'",
    }


def test_unreadable_files_are_one_line_errors(tmp_path):
    for name, why in _unreadable_cases(tmp_path).items():
        with pytest.raises(HarnessError, match=why) as e:
            load_harness(str(tmp_path / name))
        assert "\n" not in str(e.value) and str(tmp_path / name) in str(e.value), name


def _without_dac_override() -> list[str] | None:
    """A command prefix that runs a child without root's right to read any file (None: not needed, or
    not possible here)."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: every file is readable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_unreadable_permission_is_one_line_error(tmp_path, capsys, monkeypatch):
    p = tmp_path / "secret.yaml"
    p.write_text(_yaml_of("react"))
    p.chmod(0)
    try:
        prefix = _without_dac_override()
        if prefix is None:
            with pytest.raises(HarnessError, match="permission denied"):
                load_harness(str(p))
            code, _, err = _cli(["harness", "show", str(p)], capsys, monkeypatch)
        else:
            r = subprocess.run([*prefix, sys.executable, "-m", "harnevo.cli", "harness", "show", str(p)],
                               capture_output=True, text=True, timeout=120)
            code, err = r.returncode, r.stderr
        assert code == 2 and "permission denied" in err and err.count("\n") == 1 and "Traceback" not in err
    finally:
        p.chmod(0o600)


def test_cli_show_prints_both_ids_and_errors_in_one_line(tmp_path, capsys, monkeypatch):
    code, out, _ = _cli(["harness", "show", "bpe_inline"], capsys, monkeypatch)
    h = load_harness("bpe_inline")
    assert code == 0 and out.startswith(f"# id: {h.id}\n# behaviour_id: {h.behaviour_id}\n")
    assert Harness.from_yaml(out) == h  # the printed YAML loads back (the id lines are comments)
    code, out, _ = _cli(["harness", "list"], capsys, monkeypatch)
    assert code == 0 and all(load_harness(n).behaviour_id in out for n in SEEDS)
    for name, why in _unreadable_cases(tmp_path).items():
        code, out, err = _cli(["harness", "show", str(tmp_path / name)], capsys, monkeypatch)
        assert code == 2 and why in err and err.count("\n") == 1 and "Traceback" not in err, (name, err)


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
        g = parse_task_goal(text)
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
    ws = Workspace.start(h.memory, parse_task_goal(task), room, bank)
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
    # the workspace reads its snapshot and records edits; it never writes the bank itself
    assert bank.lessons == [] and not (tmp_path / "experience.json").exists()
    assert ws.bank_edits == [{"op": "add", "text": "apples are often on the countertop"},
                             {"op": "add", "text": "apple was found at a countertop"}]
    bank.apply(ws.bank_edits)  # what the evaluator does, in game order
    bank.save()
    again = ExperienceBank(tmp_path / "experience.json", size=3)
    texts = [l.text for l in again.lessons]
    assert "apples are often on the countertop" in texts and "apple was found at a countertop" in texts
    ws = Workspace.start(h.memory, parse_task_goal(task), room, again.snapshot())
    assert "apples are often" in ws.meta("recall", "apple countertop")
    assert [e["op"] for e in ws.bank_edits] == ["use", "use"]  # a recall marks its lessons used


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
    ws = Workspace.start(h.memory, parse_task_goal(task), room, ExperienceBank(None, size=5))
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
