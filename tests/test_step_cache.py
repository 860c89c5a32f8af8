"""The step cache (harnevo.envs.stepcache) and how EnginePool uses it: content keys, a file that
survives the process, damaged files, a poisoned entry healed by the engine, background audits, and the
engine's determinism under different hash seeds (what makes an exact cache sound)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harnevo.envs.alfworld import Observation
from harnevo.envs.pool import EngineEpisode, EnginePool
from harnevo.envs.stepcache import StepCache, child_node, game_key, root_node

DATA = Path(__file__).resolve().parents[2] / "shared" / "alfworld"
SPLIT = DATA / "json_2.1.1" / "valid_seen"
REPO = Path(__file__).resolve().parents[1]

def _games() -> list[str]:
    # the first games sorted by name are look_at_obj_in_light ones: 3-4 step walkthroughs
    return [str(p) for p in sorted(SPLIT.glob("*/*/game.tw-pddl"))[:3]]


def _walkthrough(game: str) -> list[str]:
    with open(game) as f:
        return json.load(f)["walkthrough"]


def _obs(text: str, **kw) -> dict:
    return Observation(text=text, **kw).to_dict()


def _nodes(game: str, actions: list[str]) -> list[bytes]:
    """Step-cache nodes of the start and after each action."""
    nodes = [root_node(game_key(os.path.realpath(game)))]
    for a in actions:
        nodes.append(child_node(nodes[-1], a))
    return nodes


async def _play(ep: EngineEpisode, actions: list[str]) -> list[Observation]:
    return [await ep.step(a) for a in actions]


def _run(coro, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# ----------------------------------------------------------------------------- no engine needed

def _copy_game(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("game.tw-pddl", "traj_data.json"):
        shutil.copy(src / name, dst / name)
    return dst / "game.tw-pddl"


@pytest.mark.skipif(not SPLIT.is_dir(), reason="needs the shared ALFWorld games")
def test_game_key_is_the_content_the_engine_reads(tmp_path):
    src = Path(_games()[0]).parent
    a, b = _copy_game(src, tmp_path / "a"), _copy_game(src, tmp_path / "b")
    assert game_key(str(a)) == game_key(str(b)) == game_key(str(src / "game.tw-pddl"))  # not the path
    os.utime(b, (1, 1))
    assert game_key(str(a)) == game_key(str(b))  # not the mtime
    assert game_key(str(a)) != game_key(str(a), expert="handcoded") != game_key(str(a), expert="planner")
    traj = b.parent / "traj_data.json"
    traj.write_text(traj.read_text() + " ")
    assert game_key(str(a)) == game_key(str(b))  # without the expert the engine never reads traj_data.json
    assert game_key(str(a), expert="handcoded") != game_key(str(b), expert="handcoded")
    b.write_bytes(b.read_bytes().replace(b'"walkthrough"', b'"walkthrough" '))  # same size + 1, same JSON
    assert game_key(str(a)) != game_key(str(b))
    with pytest.raises(OSError):
        game_key(str(tmp_path / "missing.tw-pddl"))


def test_entries_persist_and_are_checked_on_read(tmp_path):
    path = tmp_path / "steps.sqlite"
    root = root_node("k")
    nodes = [child_node(root, f"go to shelf {i}") for i in range(300)]  # more than one batch
    c = StepCache(path)
    c.put(root, None, "", _obs("start"))
    for i, n in enumerate(nodes):
        c.put(n, root, f"go to shelf {i}", _obs(f"shelf {i}", admissible=["look", f"take x {i}"]))
    c.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # what lets several processes share it
    db.close()
    c = StepCache(path)
    assert len(c) == 301
    assert c.get(nodes[7])[0] == _obs("shelf 7", admissible=["look", "take x 7"])
    assert c.get(child_node(root, "nowhere")) is None
    c.close()
    # a row whose observation no longer matches its digest is a miss, and is gone
    db = sqlite3.connect(path)
    db.execute("UPDATE steps SET digest = ? WHERE node = ?", ("0" * 40, nodes[3]))
    db.commit()
    db.close()
    c = StepCache(path)
    assert c.get(nodes[3]) is None and c.stats["bad_rows"] == 1 and len(c) == 300
    c.close()


def test_a_file_that_is_not_a_database_is_started_over(tmp_path, caplog):
    path = tmp_path / "steps.sqlite"
    path.write_bytes(b"this is not a database\n" * 500)
    with caplog.at_level(logging.WARNING, logger="harnevo.envs.stepcache"):
        c = StepCache(path)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "starting it over" in warnings[0], warnings
    assert c.persistent
    c.put(root_node("g"), None, "", _obs("start"))
    c.close()
    assert StepCache(path).get(root_node("g"))[0] == _obs("start")  # a working SQLite file again


def test_damaged_pages_never_raise(tmp_path, caplog):
    path = tmp_path / "steps.sqlite"
    c = StepCache(path)
    root = root_node("g")
    nodes = [child_node(root, f"a{i}") for i in range(2000)]
    for i, n in enumerate(nodes):
        c.put(n, root, f"a{i}", _obs(f"observation number {i} " * 20))
    c.close()
    data = bytearray(path.read_bytes())
    assert len(data) > 64 * 1024
    data[len(data) // 2: len(data) // 2 + 16384] = b"\xa5" * 16384  # garbage over pages of the table
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="harnevo.envs.stepcache"):
        c = StepCache(path)
        found = [c.get(n) for n in nodes]  # each is the stored observation or a miss, never an exception
        for i, hit in enumerate(found):
            assert hit is None or hit[0] == _obs(f"observation number {i} " * 20)
        c.put(child_node(root, "new"), root, "new", _obs("new"))
        c.flush()
        assert c.get(child_node(root, "new"))[0] == _obs("new")
    c.close()
    assert any(h is None for h in found)  # the damage was seen...
    assert all("\n" not in r.getMessage() for r in caplog.records)  # ...and reported in one line each


def test_audit_choice_is_seeded_and_about_the_fraction():
    root = root_node("g")
    nodes = [child_node(root, str(i)) for i in range(4000)]
    a, b, c = EnginePool(1, audit=0.05), EnginePool(1, audit=0.05), EnginePool(1, audit=0.05, audit_seed=1)
    picks = [a._audit_due(n) for n in nodes]
    assert picks == [b._audit_due(n) for n in nodes]
    assert picks != [c._audit_due(n) for n in nodes]
    assert 120 < sum(picks) < 280  # 1 in 20 of 4000
    # the same path closed again and again is audited now and then, not never
    assert any(a._audit_due(nodes[0]) for _ in range(200))
    assert not any(EnginePool(1, audit=0)._audit_due(n) for n in nodes[:100])
    with pytest.raises(ValueError):
        EnginePool(1, audit=1.5)
    with pytest.raises(TypeError):
        EnginePool(1, step_cache=10_000)


# ----------------------------------------------------------------------------- with the engine

@pytest.mark.needs_alfworld_data
@pytest.mark.skipif(not SPLIT.is_dir(), reason="needs the shared ALFWorld games")
def test_poisoned_entry_is_healed_and_the_episode_wins(tmp_path):
    game = _games()[1]
    walk = _walkthrough(game)  # go to desk 1, take bowl 1 from desk 1, go to dresser 1, use desklamp 1
    path = tmp_path / "steps.sqlite"
    nodes = _nodes(game, walk)
    lie = _obs("Nothing happens.", admissible=["look"])

    async def scenario():
        async with EnginePool(1, step_cache=path, audit=0) as pool:
            ep = await pool.new_episode(game)
            truth = await _play(ep, walk)
            await ep.close()
        assert truth[-1].won
        # a wrong answer for the walkthrough's first action, as a faulty writer would have stored it
        c = StepCache(path)
        assert c.get(nodes[1])[0] == truth[0].to_dict()
        c.replace(nodes[1], nodes[0], walk[0], lie)
        c.close()

        async with EnginePool(1, step_cache=path, audit=0) as pool:
            ep = await pool.new_episode(game)
            assert ep.forked_from_cache and ep._pid == 0  # no engine process yet
            assert (await ep.step(walk[0])).text == "Nothing happens."  # nothing can tell it apart yet
            # an action the cache has never seen: the engine replays walk[0] first, and contradicts the cache
            look = await ep.step("look")
            assert ep._pid and pool.stats["replayed_steps"] == 1
            assert pool.stats["step_cache_mismatches"] == 1 and ep.corrections == 1
            assert "desk 1" in look.text
            rest = await _play(ep, walk[1:])
            assert rest[-1].won and rest[-1].done  # the episode went on on the engine and won
            await ep.close()
            again = await pool.new_episode(game)  # later episodes get the engine's answer
            assert await _play(again, walk) == truth
            assert pool.stats["step_cache_mismatches"] == 1 and pool.stats["errors"] == 0
            await again.close()
        c = StepCache(path)
        assert c.get(nodes[1])[0] == truth[0].to_dict()  # healed in the file too
        c.close()

    _run(scenario())


@pytest.mark.needs_alfworld_data
@pytest.mark.skipif(not SPLIT.is_dir(), reason="needs the shared ALFWorld games")
def test_full_hit_episodes_are_audited_in_the_background(tmp_path):
    game = _games()[0]
    walk = _walkthrough(game)
    nodes = _nodes(game, walk)

    async def scenario():
        async with EnginePool(1, step_cache=tmp_path / "steps.sqlite", audit=1.0) as pool:
            ep = await pool.new_episode(game)
            truth = await _play(ep, walk)
            await ep.close()  # every answer came from the engine: nothing to audit
            assert truth[-1].won and pool.stats["audits"] == 0 and not pool._audits
            pool.step_cache.replace(nodes[2], nodes[1], walk[1], _obs("You break the desklamp 1."))
            forks = pool.stats["forks"]
            ep = await pool.new_episode(game)
            served = await _play(ep, walk)
            assert served[1].text == "You break the desklamp 1." and served[-1].won  # full hit, lie included
            assert ep._pid == 0 and pool.stats["forks"] == forks  # no engine while the episode ran
            await ep.close()
            assert len(pool._audits) == 1  # running after close returned
            await pool.wait_audits(60)
            assert pool.stats["audits"] == 1 and pool.stats["audited_steps"] == len(walk)
            assert pool.stats["step_cache_mismatches"] == 1 and pool.stats["audit_errors"] == 0
            ep = await pool.new_episode(game)
            assert await _play(ep, walk) == truth
            await ep.close()
            await pool.wait_audits(60)
            assert pool.stats["step_cache_mismatches"] == 1  # the second audit found nothing wrong

    _run(scenario())


@pytest.mark.needs_alfworld_data
@pytest.mark.skipif(not SPLIT.is_dir(), reason="needs the shared ALFWorld games")
def test_a_second_process_replays_from_the_file_without_the_engine(tmp_path, caplog):
    game = _games()[2]
    walk = _walkthrough(game)
    path = tmp_path / "steps.sqlite"
    path.write_bytes(b"\x00" * 4096)  # a damaged file to begin with: the run goes on

    async def first():
        async with EnginePool(1, step_cache=path) as pool:
            ep = await pool.new_episode(game)
            obs = await _play(ep, walk)
            await ep.close()
            return obs

    with caplog.at_level(logging.WARNING, logger="harnevo.envs.stepcache"):
        truth = _run(first())
    assert truth[-1].won and len(caplog.records) == 1
    script = textwrap.dedent(f"""
        import asyncio, json, sys
        from harnevo.envs.pool import EnginePool
        async def main():
            async with EnginePool(1, step_cache={str(path)!r}, audit=0) as pool:
                ep = await pool.new_episode({game!r})
                obs = [(await ep.step(a)).to_dict() for a in {walk!r}]
                await ep.close()
                print(json.dumps({{"obs": obs, "stats": pool.stats, "first": ep.first.to_dict(),
                                  "workers": [w.proc is not None for w in pool._workers],
                                  "engine": any(m.startswith("textworld") for m in sys.modules)}}))
        asyncio.run(main())
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["obs"] == [o.to_dict() for o in truth]
    assert out["stats"]["step_cache_hits"] == len(walk) and out["stats"]["forks"] == 0
    assert out["workers"] == [False] and not out["engine"]  # no worker started, textworld never imported


@pytest.mark.needs_alfworld_data
@pytest.mark.skipif(not SPLIT.is_dir(), reason="needs the shared ALFWorld games")
def test_observations_do_not_depend_on_the_hash_seed(monkeypatch):
    """One game played in two worker processes with different PYTHONHASHSEEDs: every observation (text,
    admissible commands in their order, flags) is the same, which is what lets the cache be exact."""
    game = str(sorted(SPLIT.glob("pick_clean_then_place_in_recep-*/*/game.tw-pddl"))[0])
    walk = _walkthrough(game)

    async def play(seed: str, explore: list[str] | None) -> tuple[list[dict], list[str]]:
        monkeypatch.setenv("PYTHONHASHSEED", seed)
        async with EnginePool(1, step_cache=None) as pool:
            ep = await pool.new_episode(game)
            environ = Path(f"/proc/{pool._workers[0].proc.pid}/environ").read_bytes().split(b"\0")
            assert f"PYTHONHASHSEED={seed}".encode() in environ
            seen, obs, actions = [ep.first.to_dict()], ep.first, []
            for i in range(12):  # wander: pick among the admissible commands, sorted, by a fixed rule
                a = explore[i] if explore else sorted(obs.admissible)[(7 * i + 3) % len(obs.admissible)]
                actions.append(a)
                obs = await ep.step(a)
                seen.append(obs.to_dict())
            await ep.close()
            ep = await pool.new_episode(game)
            seen += [o.to_dict() for o in await _play(ep, walk + ["inventory", "look"])]
            await ep.close()
        return seen, actions

    async def both():
        a, actions = await play("1", None)
        b, _ = await play("2", actions)
        return a, b

    a, b = _run(both(), timeout=240)
    assert a[-3]["won"]  # the walkthrough won
    diffs = [(i, k) for i, (x, y) in enumerate(zip(a, b)) for k in x if x[k] != y[k]]
    assert not diffs and len(a) == len(b) == 13 + len(walk) + 2
