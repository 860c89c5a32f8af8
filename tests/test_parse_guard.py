"""Replies to actions (parse.py) and action guards (guard.py)."""

from __future__ import annotations

import pytest

from harnevo.harness.guard import GUARDS, guard, object_instances
from harnevo.harness.parse import parse_reply
from harnevo.harness.spec import load_harness


@pytest.mark.parametrize("reply,action", [
    ("Think: go.\nAction: go to desk 1", "go to desk 1"),
    ("  action:   Take Apple 1 from Countertop 1.  ", "take apple 1 from countertop 1"),
    ("> open fridge 1", "open fridge 1"),
    ("<think>hmm\nAction: look</think>\nAction: go to bed 1", "go to bed 1"),
    ('Action: "use desklamp 1"', "use desklamp 1"),
    ("**Action:** `examine desk 1`", "examine desk 1"),
])
def test_parse_reply_tolerant(reply, action):
    assert parse_reply(reply).action == action
    assert parse_reply(reply, bare_line=True).action == action


@pytest.mark.parametrize("reply", ["go to sofa 1", "Think: the sofa.\ngo to sofa 1", "Sure! Here is my answer.",
                                   "I will look around first.\nlook"])
def test_bare_last_line_is_a_command_only_when_asked(reply):
    off = parse_reply(reply)
    assert off.action is None and off.meta is None and "no action found" in off.error
    on = parse_reply(reply, bare_line=True)
    assert on.error is None and on.action == reply.splitlines()[-1].lower().rstrip(".!")


def test_bare_line_rules_when_on():
    long_last = "I am unsure what to do here and I will think about it for a very long time, really long."
    assert parse_reply("first\n" + long_last, bare_line=True).error  # a long last line of several is not a command
    assert parse_reply(long_last, bare_line=True).action  # the only line is read, as before
    assert parse_reply("Think: still thinking", bare_line=True).error  # thought lines are never commands


def test_seeds_and_default_policy_keep_the_fallback_off():
    for name in ("react", "bpe_always_on", "bpe_inline"):
        assert load_harness(name).reply.bare_line_fallback is False
    on = load_harness("react").evolve(reply={"bare_line_fallback": True})
    assert on.reply.bare_line_fallback and on.behaviour_id != load_harness("react").behaviour_id


def test_parse_meta_and_invalid():
    assert parse_reply("Action: track apple", meta_actions=True).meta == ("track", "apple")
    assert parse_reply("Action: track apple", meta_actions=False).action == "track apple"
    assert parse_reply("Action: commit took apple 1", meta_actions=True).meta == ("commit", "took apple 1")
    assert parse_reply("").error
    assert parse_reply("Think: I am unsure what to do here and I will think about it for a very long time "
                       "before deciding anything, since the room is large.\nThought: still thinking").error


def test_guards_as_before():
    adm = ["go to desk 1", "move apple 1 to fridge 1", "look"]
    assert guard("none", "go to desk 2", adm).action == "go to desk 2"
    r = guard("reject", "go to desk 2", adm)
    assert r.action is None and "not an admissible" in r.note
    assert guard("nearest_admissible", "put apple 1 in fridge 1", adm).action == "move apple 1 to fridge 1"
    assert guard("nearest_admissible", "go to desk", adm).action == "go to desk 1"
    assert guard("nearest_admissible", "xyzzy", adm).action == "xyzzy"
    with pytest.raises(ValueError, match="unknown guard"):
        guard("maybe", "look", adm)


ADM = ["take apple 1 from countertop 1", "take bread 1 from countertop 1", "go to fridge 1",
       "move apple 1 to countertop 1", "examine countertop 1", "look", "inventory"]


def test_nearest_admissible_changes_numbers_silently():
    g = guard("nearest_admissible", "take apple 2 from countertop 1", ADM)
    assert g.action == "take apple 1 from countertop 1"  # the behaviour the new guard avoids


@pytest.mark.parametrize("action,expected", [
    ("take apple 2 from countertop 1", "take apple 2 from countertop 1"),  # another apple: never renumbered
    ("take apple 1 from countertop 2", "take apple 1 from countertop 2"),
    ("go to fridge 2", "go to fridge 2"),
    ("go to fridge", "go to fridge"),  # a missing number is not guessed either
    ("tkae apple 1 from countertop 1", "take apple 1 from countertop 1"),  # verb typo
    ("take apple 1 form countertop 1", "take apple 1 from countertop 1"),
    ("put apple 1 in/on countertop 1", "move apple 1 to countertop 1"),  # old syntax
    ("put apple 1 on countertop 1", "move apple 1 to countertop 1"),
    ("lok", "look"),  # no objects: the object-free commands are the candidates
    ("examine countertop 1", "examine countertop 1"),  # admissible as written
    ("xyzzy", "xyzzy"),
])
def test_nearest_same_objects_never_changes_an_object(action, expected):
    g = guard("nearest_same_objects", action, ADM)
    assert g.action == expected
    assert object_instances(g.action) == object_instances(action)
    if expected != action:
        assert g.note == f"'{action}' read as '{expected}'"
    else:
        assert g.note is None


def test_object_instances():
    assert object_instances("take apple 2 from countertop 1") == ("apple 2", "countertop 1")
    assert object_instances("look") == ()
    assert "nearest_same_objects" in GUARDS
    h = load_harness("bpe_always_on").evolve(guard="nearest_same_objects")
    assert h.guard == "nearest_same_objects"
    assert {load_harness(n).guard for n in ("bpe_always_on", "bpe_inline")} == {"nearest_admissible"}
