"""harnevo's ALFWorld game generator: pure checks of the drawn scenes and tasks, then engine checks on a
few generated games (generated once per module: generating is a few seconds of CPU per game)."""

from __future__ import annotations

import filecmp
import json
import random
import re
from pathlib import Path

import pytest

from harnevo.envs import alfworld as A
from harnevo.envs import gamestats
from harnevo.envs import scenes as sc
from harnevo.envs.games import FAMILIES, load_games
from harnevo.envs.generate import (MANIFEST, _family_plan, draw_game, feasible_families, game_seed, generate,
                                   generate_held_out, mangle, read_manifest, split_dir, task_candidates,
                                   verify_games)
from harnevo.errors import HarnevoError

C = sc._constants()  # alfworld.gen.constants (imported without alfworld's $ALFWORLD_DATA side effect)

SHARED_VALID_SEEN = Path(__file__).resolve().parents[2] / "shared" / "alfworld" / "json_2.1.1" / "valid_seen"


# ----------------------------------------------------------------------------------------------- pure


def _facts(problem: str, name: str) -> list[tuple[str, ...]]:
    init = problem.split("(:init", 1)[1].split("(:goal")[0]
    return [tuple(m.split()) for m in re.findall(rf"\({name} ([^()]*)\)", init)]


def _draws(n_per_family: int = 4, seed: int = 11):
    out = []
    for fam in FAMILIES:
        for i in range(n_per_family):
            rng = random.Random(game_seed(seed, i, 0) + len(fam))
            out.append(draw_game(rng, fam, sc.all_scenes(), f"trial_t{i}", 5))
    return out


def test_family_plan_is_balanced():
    plan = _family_plan(120, list(FAMILIES))
    assert {f: plan.count(f) for f in FAMILIES} == {f: 20 for f in FAMILIES}
    plan = _family_plan(8, ["heat", "cool", "look"])
    assert sorted(plan.count(f) for f in ("heat", "cool", "look")) == [2, 3, 3]


def test_mangle_matches_alfworld_names():
    assert mangle("Cabinet|-00.48|+02.05|+00.39") == \
        "Cabinet_bar__minus_00_dot_48_bar__plus_02_dot_05_bar__plus_00_dot_39"
    assert mangle("loc|-3|5|2|-30") == "loc_bar__minus_3_bar_5_bar_2_bar__minus_30"
    assert mangle("Sink|-01.11|+00.93|+00.34|SinkBasin").endswith("_bar_SinkBasin")


def test_draw_is_reproducible():
    a = draw_game(random.Random(5), "pick2", sc.all_scenes(), "trial_a", 9)
    b = draw_game(random.Random(5), "pick2", sc.all_scenes(), "trial_a", 9)
    assert (a.problem, a.traj, a.grammar, a.direct) == (b.problem, b.traj, b.grammar, b.direct)
    c = draw_game(random.Random(6), "pick2", sc.all_scenes(), "trial_a", 9)
    assert c.problem != a.problem


def test_drawn_games_follow_alfworld_rules():
    static = sc.static_receptacle_types()
    for d in _draws():
        p, t = d.problem, d.task
        rtype = {r: ty[:-4] for r, ty in _facts(p, "receptacleType")}
        otype = {o: ty[:-4] for o, ty in _facts(p, "objectType")}
        # task types go to the room types ALFWorld allows
        assert sc.room_of(d.scene_num) in C.GOALS_VALID[t.task_type]
        # objects only where ALFWorld's constants allow (the desk lamp on its usual furniture)
        for o, r in _facts(p, "inReceptacle"):
            ok = (sc.LAMP_HOSTS if otype[o] == "DeskLamp"
                  else [k for k, v in C.VAL_RECEPTACLE_OBJECTS.items() if otype[o] in v])
            assert rtype[r] in ok, (otype[o], rtype[r])
        # the target is somewhere visible, never already in the destination type
        placed = [(otype[o], rtype[r]) for o, r in _facts(p, "inReceptacle")]
        assert any(ot == t.object_target for ot, _ in placed)
        assert (t.object_target, t.parent_target) not in placed
        if t.family == "pick2":
            assert sum(ot == t.object_target for ot, _ in placed) >= 2
        # openable receptacles exist and all start closed, only openable classes are openable
        openable = [r for (r,) in _facts(p, "openable")]
        assert all(rtype[r] in C.OPENABLE_CLASS_SET for r in openable)
        assert "(opened " not in p
        # every receptacle sits at a declared location; every name is declared once
        declared = re.findall(r"^\s*(\S+) - (object|receptacle|location)$", p.split("(:init")[0], re.M)
        names = [n for n, _ in declared]
        assert len(names) == len(set(names))
        locs = {n for n, k in declared if k == "location"}
        assert all(loc in locs for _, loc in _facts(p, "receptacleAtLocation"))
        assert set(rtype.values()) <= static
        # the traj_data the handcoded expert reads
        assert d.traj["task_type"] == t.task_type and d.traj["pddl_params"]["object_target"] == t.object_target
        assert d.direct and d.traj["turk_annotations"]["anns"][0]["task_desc"] in d.grammar


def test_task_candidates_need_the_appliance():
    kitchen, bedroom = sc.load_layout(1), sc.load_layout(301)
    assert task_candidates(kitchen, "heat") and not task_candidates(bedroom, "heat")
    assert all(p != "Microwave" for _, p in task_candidates(kitchen, "heat"))
    assert set(feasible_families([301])) == {"pick", "look", "pick2"}


def test_split_scenes_hold_out_whole_scenes():
    train, unseen = sc.split_scenes()
    assert unseen == sorted(sc.ALFWORLD_UNSEEN_SCENES) and not set(train) & set(unseen)
    assert set(train) | set(unseen) == set(sc.all_scenes())
    t2, u2 = sc.split_scenes(7, per_room=2)
    assert (t2, u2) == sc.split_scenes(7, per_room=2) and len(u2) == 8 and not set(t2) & set(u2)
    for side in (t2, u2):
        assert set(feasible_families(side)) == set(FAMILIES)


def test_generate_rejects_bad_input(tmp_path):
    with pytest.raises(HarnevoError):
        generate(tmp_path, 2, scenes=[999])
    with pytest.raises(HarnevoError, match="heat"):
        generate(tmp_path, 2, families=["heat"], scenes=[301, 302])
    with pytest.raises(HarnevoError):
        generate(tmp_path, 2, families=["boil"])
    d = split_dir(tmp_path, "generated")
    d.mkdir(parents=True)
    (d / "something").write_text("x")
    with pytest.raises(HarnevoError, match="already holds"):
        generate(tmp_path, 1)


# --------------------------------------------------------------------------------------------- engine

SEED = 3


N_SAMPLE = 18  # 3 per family: with 12, about one seed in 13 puts a median more than 30% off


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """18 games (3 per family) generated once for the module."""
    out = tmp_path_factory.mktemp("gen18")
    report = generate(out, N_SAMPLE, seed=SEED, workers=2)
    return out, report


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes(tmp_path):
    a = generate(tmp_path / "a", 6, seed=SEED + 1, workers=1)
    b = generate(tmp_path / "b", 6, seed=SEED + 1, workers=2)
    assert a.games == b.games == 6
    ta, tb = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert ta == tb and len(ta) == 6 * 3 + 1
    text = b"".join(ta.values())
    assert str(tmp_path).encode() not in text  # no absolute paths in the files
    assert not filecmp.dircmp(tmp_path / "a", tmp_path / "b").diff_files


def test_sample_is_balanced_and_loadable(sample):
    out, report = sample
    assert report.games == N_SAMPLE and report.missing == []
    assert report.families == {f: 3 for f in sorted(FAMILIES)}
    assert 0.0 <= report.discard_rate < 0.5
    assert sum(report.solvers.values()) == N_SAMPLE
    games = load_games("generated", data=out)
    assert len(games) == N_SAMPLE
    assert {g.family: sum(1 for h in games if h.family == g.family) for g in games} == {f: 3 for f in FAMILIES}
    manifest = read_manifest(split_dir(out, "generated"))
    assert manifest["synthetic"] is True and manifest["games"] == N_SAMPLE
    assert (split_dir(out, "generated") / MANIFEST).is_file()


def test_every_walkthrough_wins(sample):
    out, _ = sample
    games = load_games("generated", data=out)
    for g in games:
        data = json.loads(Path(g.path).read_text())
        assert data["solvable"] is True and 0 < len(data["walkthrough"]) <= 50
        traj = json.loads((Path(g.path).parent / "traj_data.json").read_text())
        assert traj["harnevo"]["synthetic"] is True and traj["harnevo"]["solver"] in ("handcoded", "planner")
    won = verify_games([g.path for g in games], workers=2)  # harnevo.envs.alfworld.replay, in 2 processes
    assert won == {g.path: True for g in games}


def test_held_out_splits_never_share_scenes(tmp_path):
    a, b = generate_held_out(tmp_path, 0, 0, seed=1)
    ma, mb = read_manifest(split_dir(tmp_path, "train")), read_manifest(split_dir(tmp_path, "unseen"))
    assert a.games == b.games == 0 and ma["synthetic"] and mb["synthetic"]
    assert not set(ma["scenes"]) & set(mb["scenes"]) and set(mb["scenes"]) == set(sc.ALFWORLD_UNSEEN_SCENES)


def test_handcoded_expert_plays_a_generated_game(sample):
    out, _ = sample
    g = next(g for g in load_games("generated", data=out, families=["heat"]))
    env = A.make_env(g.path, expert="handcoded")
    try:
        obs = A.reset(env)
        assert obs.expert_plan and "Your task is to:" in obs.text
    finally:
        env.close()


@pytest.mark.needs_alfworld_data
@pytest.mark.skipif(not SHARED_VALID_SEEN.is_dir(), reason="official valid_seen games not found")
def test_statistics_close_to_official(sample):
    out, _ = sample
    gen = gamestats.split_stats(split_dir(out, "generated"))
    off = gamestats.split_stats(SHARED_VALID_SEEN)
    assert len(gen) == N_SAMPLE and len(off) >= 100
    rows = gamestats.compare(gen, off)
    table = gamestats.markdown_table(rows, n_generated=len(gen), n_official=len(off))
    for row in rows:
        assert row.within(0.30), f"{row.label}: generated {row.generated} vs official {row.official}\n{table}"
