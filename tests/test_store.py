"""The population store (harnevo/population): create/open/resume, damaged files refused untouched,
harness and trajectory round-trips, infra_error replaced and ok final, generations with RNG state,
bytes and time per recorded episode, and a writer killed with SIGKILL mid-run."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harnevo.errors import HarnevoError
from harnevo.harness.genome import with_genes
from harnevo.harness.spec import load_harness
from harnevo.population import STORE_FILE, Store, rng_state_from_json, rng_state_to_json
from harnevo.population.export import diff, export_harness
from harnevo.runtime.trajectory import INFRA_ERROR, OK, Trajectory, Turn

CONFIG = {"seed": 7, "population": 8, "generations": 5, "model": "sim/planner", "split": "valid_seen"}
VERSIONS = {"harnevo": "0.1.0", "alfworld": "0.4.2", "textworld": "1.7.0", "model": "sim/planner"}
MODEL = "sim/planner"

# --- realistic trajectories: ALFWorld's words, a room per game, a history window that slides ---------
OBJECTS = ("apple", "bowl", "bread", "butterknife", "cup", "dishsponge", "egg", "fork", "kettle", "knife",
           "ladle", "lettuce", "mug", "pan", "peppershaker", "plate", "pot", "potato", "saltshaker",
           "soapbottle", "spatula", "spoon", "tomato", "creditcard", "cellphone", "keychain", "pencil", "pen",
           "book", "cd", "remotecontrol", "statue", "vase", "watch", "box", "laptop", "pillow", "candle")
RECEPTACLES = ("cabinet", "countertop", "drawer", "fridge", "microwave", "sinkbasin", "stoveburner", "toaster",
               "coffeemachine", "garbagecan", "shelf", "diningtable", "sidetable", "dresser", "sofa", "armchair",
               "bed", "desk", "safe", "cart")
TASKS = ("put a {o} in {r}.", "put a clean {o} in {r}.", "put a hot {o} in {r}.", "put a cool {o} in {r}.",
         "put two {o} in {r}.", "look at {o} under the desklamp.")


def system_prompt(rng: random.Random) -> str:
    """About 1,500 characters: an instruction, the reply format, one worked example."""
    lines = ["You are an agent in a household simulator (ALFWorld). Each turn you see the task, the room, the "
             "recent history and the admissible actions; reply with one thought and one action.",
             "Reply format:\nThink: <one short sentence>\nAction: <one admissible action, written exactly>",
             "Rules: take one object at a time; open a closed receptacle before looking inside; to clean use "
             "the sinkbasin, to heat the microwave, to cool the fridge; never repeat a failed action.",
             "Example:"]
    while sum(map(len, lines)) < 1400:
        o, r = rng.choice(OBJECTS), rng.choice(RECEPTACLES)
        lines.append(f"> go to {r} {rng.randint(1, 9)}\nOn the {r} {rng.randint(1, 9)}, you see a {o} "
                     f"{rng.randint(1, 4)}.\n> take {o} {rng.randint(1, 4)} from {r} {rng.randint(1, 9)}\n"
                     f"You pick up the {o} {rng.randint(1, 4)} from the {r} {rng.randint(1, 9)}.")
    return "\n\n".join(lines)


def make_trajectory(rng: random.Random, *, harness_id: str, behaviour_id: str, system: str, game: str,
                    sample: int = 0, turns: int = 15, status: str = OK) -> Trajectory:
    receptacles = [f"{r} {i}" for r in rng.sample(RECEPTACLES, 12) for i in range(1, rng.randint(2, 5))]
    contents = {r: [f"{o} {rng.randint(1, 4)}" for o in rng.sample(OBJECTS, rng.randint(0, 4))] for r in receptacles}
    goal_obj, goal_rec = rng.choice(OBJECTS), rng.choice(receptacles)
    task = rng.choice(TASKS).format(o=goal_obj, r=goal_rec.split()[0])
    room = ("You are in the middle of a room. Looking quickly around you, you see "
            + ", ".join(f"a {r}" for r in receptacles[:-1]) + f", and a {receptacles[-1]}.")
    traj = Trajectory(key=f"{behaviour_id}|{MODEL}|valid_seen|{game}|{sample}", harness_id=harness_id,
                      harness_name="react", model=MODEL, simulated=True, split="valid_seen", game=game,
                      game_path=f"/data/json_2.1.1/valid_seen/{game}/game.tw-pddl", family=game.split("-")[0],
                      sample=sample, behaviour_id=behaviour_id, task=task, status=status,
                      bank_edits=[{"op": "add", "text": f"look in {goal_rec} first for a {goal_obj}"}],
                      bank_seen=f"{rng.getrandbits(64):016x}")
    history: list[str] = []
    where, observation = "middle of the room", room
    for step in range(1, turns + 1):
        admissible = ([f"go to {r}" for r in receptacles if r != where] + ["inventory", "look"]
                      + [f"take {o} from {where}" for o in contents.get(where, [])] + [f"examine {where}"])
        turn_msg = (f"## Task\n{task}\n\n## Room\n{room}\n\n## History\n" + ("\n".join(history[-8:]) or "(none)")
                    + f"\n\n## Observation\n{observation}\n\n## Admissible actions\n" + "\n".join(admissible)
                    + f"\n\nStep {step} of 50.")
        where = rng.choice(receptacles)
        action = f"go to {where}"
        seen = contents[where]
        observation = (f"You arrive at {where}. On the {where}, you see "
                       + (", ".join(f"a {o}" for o in seen) if seen else "nothing") + ".")
        reply = f"Think: a {goal_obj} could be at {where}, which I have not checked yet.\nAction: {action}"
        history.append(f"> {action}\n{observation}")
        pt, ct = rng.randint(800, 1200), rng.randint(20, 60)
        cost = pt * 1.5e-7 + ct * 6e-7
        traj.add_turn(Turn(step=step, messages=[{"role": "system", "content": system},
                                                {"role": "user", "content": turn_msg}],
                           reply=reply, action=action, executed=action, observation=observation,
                           prompt_tokens=pt, completion_tokens=ct, cost_usd=cost, spent_usd=cost,
                           latency_s=rng.uniform(0.2, 2.0), finish_reason="stop"))
        traj.steps = traj.env_actions = step
    traj.success = status == OK and rng.random() < 0.5
    traj.reason = "won" if traj.success else ("step budget exhausted" if status == OK else "engine error: crashed")
    traj.wall_seconds = rng.uniform(5, 40)
    return traj


@pytest.fixture(scope="module")
def seed():
    return load_harness("react")


@pytest.fixture
def store(tmp_path, seed):
    s = Store.create(tmp_path / "run", CONFIG, VERSIONS)
    s.add_harness(seed, parents=[], operator="seed", generation=0)
    yield s
    s.close()


def _traj(seed, rng=None, **kw) -> Trajectory:
    rng = rng or random.Random(1)
    kw.setdefault("game", "pick_and_place_simple-Apple-None-Fridge-1/trial_T1")
    return make_trajectory(rng, harness_id=seed.id, behaviour_id=seed.behaviour_id, system=system_prompt(rng), **kw)


# --- create / open / resume ------------------------------------------------------------------------
def test_create_open_resume(tmp_path, seed):
    run = tmp_path / "run"
    s = Store.create(run, CONFIG, VERSIONS)
    assert s.path == run / STORE_FILE and s.config() == CONFIG and s.versions() == VERSIONS
    bid = s.add_harness(seed, parents=[], operator="seed", generation=0)
    s.record_episode(_traj(seed), model=MODEL)
    s.close()
    assert sorted(p.name for p in run.iterdir()) == [STORE_FILE]  # no temp file, WAL checkpointed away
    again = Store.create(run, dict(reversed(list(CONFIG.items()))), {"harnevo": "9"})  # same config: resume
    assert again.episode_count() == 1 and again.harness(bid) == seed and again.versions() == VERSIONS
    again.close()
    opened = Store.open(run)
    assert opened.integrity_ok() and opened.config() == CONFIG
    opened.close()
    with pytest.raises(HarnevoError, match="is closed"):
        opened.config()


def test_another_config_and_foreign_folders_are_refused(tmp_path):
    run = tmp_path / "run"
    Store.create(run, CONFIG, VERSIONS).close()
    before = (run / STORE_FILE).read_bytes()
    with pytest.raises(HarnevoError, match="holds another run") as e:
        Store.create(run, {**CONFIG, "seed": 8}, VERSIONS)
    assert "\n" not in str(e.value)
    assert (run / STORE_FILE).read_bytes() == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(HarnevoError, match="holds other files .notes.txt. but no population.sqlite"):
        Store.create(other, CONFIG, VERSIONS)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    locked = tmp_path / "locked"  # the caller's FolderLock is there before the store
    locked.mkdir()
    (locked / ".lock").write_text("123\n")
    Store.create(locked, CONFIG, VERSIONS).close()
    with pytest.raises(HarnevoError, match="no population store"):
        Store.open(tmp_path / "missing")
    with pytest.raises(HarnevoError, match="must be JSON-serialisable"):
        Store.create(tmp_path / "bad", {"x": object()}, VERSIONS)


def test_damaged_files_are_refused_in_one_line_and_left_untouched(tmp_path, seed):
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / STORE_FILE).write_bytes(random.Random(3).randbytes(20_000))
    run = tmp_path / "run"
    s = Store.create(run, CONFIG, VERSIONS)
    s.add_harness(seed, parents=[], operator="seed", generation=0)
    rng = random.Random(4)
    for i in range(40):
        s.record_episode(_traj(seed, rng, game=f"g{i}"), model=MODEL)
    s.close()
    raw = bytearray((run / STORE_FILE).read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 3000] = random.Random(5).randbytes(3000)  # a few pages torn mid-file
    (run / STORE_FILE).write_bytes(bytes(raw))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with sqlite3.connect(foreign / STORE_FILE) as c:
        c.execute("CREATE TABLE t (x)")
    for folder, pattern in ((garbage, "not a population store|not a database"), (run, "damaged|integrity"),
                            (foreign, "not a harnevo population store")):
        before = (folder / STORE_FILE).read_bytes()
        for opener in (lambda: Store.open(folder), lambda: Store.create(folder, CONFIG, VERSIONS)):
            with pytest.raises(HarnevoError, match=pattern) as e:
                opener()
            assert "\n" not in str(e.value)
            assert (folder / STORE_FILE).read_bytes() == before


def test_newer_schema_is_refused(tmp_path):
    run = tmp_path / "run"
    Store.create(run, CONFIG, VERSIONS).close()
    with sqlite3.connect(run / STORE_FILE) as c:
        c.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    c.close()
    with pytest.raises(HarnevoError, match="schema 99 is newer"):
        Store.open(run)


# --- harnesses --------------------------------------------------------------------------------------
def test_harnesses_round_trip_lineage_export_and_diff(store, seed, tmp_path):
    child = with_genes(seed, {"memory.history_window": 4})
    child = child.evolve(name="react-h4")
    grandchild = with_genes(child, {"model.temperature": 0.5})
    a = seed.behaviour_id
    b = store.add_harness(child, parents=[a], operator="mutate", generation=1,
                          detail={"genes": ["memory.history_window"]})
    c = store.add_harness(grandchild, parents=[b, a], operator="crossover", generation=2)
    assert store.add_harness(grandchild.evolve(name="renamed"), parents=[a], operator="x", generation=5) == c
    assert store.harness(c).name == grandchild.name  # the first record wins
    assert store.harness(b) == child and store.harness(b).to_yaml() == child.to_yaml()
    assert store.harness(b[:6]) == child
    with pytest.raises(HarnevoError, match="no harness"):
        store.harness("ffffffffffff")
    with pytest.raises(HarnevoError, match="no harness"):
        store.harness(b[:5])  # too short for a prefix
    with pytest.raises(HarnevoError, match="parent deadbeef is not in the store"):
        store.add_harness(with_genes(seed, {"budget.max_steps": 30}), parents=["deadbeef"], operator="m", generation=1)
    rows = store.harness_rows()
    assert [r["behaviour_id"] for r in rows] == [a, b, c]
    assert rows[1]["parents"] == [a] and rows[1]["operator"] == "mutate" and rows[1]["generation"] == 1
    assert rows[1]["detail"] == {"genes": ["memory.history_window"]} and rows[1]["name"] == "react-h4"
    assert [r["behaviour_id"] for r in store.lineage(c)] == [a, b, c]
    assert [r["behaviour_id"] for r in store.lineage(a)] == [a]
    fresh = Store.open(store.path.parent)  # through the stored YAML, not the writer's cache
    assert fresh.harness(b) == child and fresh.harness(c) == grandchild and fresh.harness(b).id == child.id
    assert fresh.harness_rows() == rows and fresh.lineage(c[:7]) == store.lineage(c)
    fresh.close()
    out = export_harness(store, c[:8], tmp_path / "out" / "best.yaml")
    assert load_harness(out) == grandchild
    d = diff(store, a, b)
    assert "-  history_window: 8" in d and "+  history_window: 4" in d and "+name: react-h4" in d
    assert diff(store, a, a) == ""


# --- episodes ---------------------------------------------------------------------------------------
def test_trajectory_round_trip_is_exact(store, seed):
    rng = random.Random(11)
    t = _traj(seed, rng, sample=2)
    t.turns[3].messages.append({"role": "assistant", "content": "surrogate \udc80 and é", "name": "x"})
    t.turns[4].messages.append({"role": "tool"})  # no content: kept inline
    t.turns[5].expert_plan, t.turns[5].meta, t.turns[5].guard_note = ["go to fridge 1"], "track apple", "n"
    store.record_episode(t, model=MODEL)
    back = store.trajectory(seed.behaviour_id, MODEL, "valid_seen", t.game, 2)
    assert back.to_dict() == t.to_dict()
    fresh = Store.open(store.path.parent)  # through the file, not the writer's cache
    assert fresh.trajectory(seed.behaviour_id, MODEL, "valid_seen", t.game, 2).to_dict() == t.to_dict()
    fresh.close()
    row = store.episodes(seed.behaviour_id, MODEL)[("valid_seen", t.game, 2)]
    assert (row.status, row.success, row.steps, row.prompt_tokens, row.cost_usd, row.bank_edits, row.reason) == (
        OK, t.success, 15, t.prompt_tokens, t.cost_usd, t.bank_edits, t.reason)
    assert (row.bank_seen, row.wall_seconds, row.family, row.harness_id) == (t.bank_seen, t.wall_seconds,
                                                                            t.family, seed.id)
    with pytest.raises(HarnevoError, match="no episode"):
        store.trajectory(seed.behaviour_id, MODEL, "valid_seen", t.game, 3)
    counted = []  # the loop may read from a worker thread (asyncio.to_thread)
    worker = threading.Thread(target=lambda: counted.append(store.episode_count()))
    worker.start()
    worker.join()
    assert counted == [1]


def test_damaged_message_content_is_an_error_not_a_wrong_trajectory(store, seed):
    t = _traj(seed, random.Random(8))
    store.record_episode(t, model=MODEL)
    path = store.path.parent
    store.close()
    with sqlite3.connect(store.path) as c:  # bit rot inside a value: SQLite's integrity check cannot see it
        blob_id, data = c.execute("SELECT id, data FROM blobs WHERE base IS NOT NULL LIMIT 1").fetchone()
        c.execute("UPDATE blobs SET data = ? WHERE id = ?", (bytes([data[0] ^ 1]) + data[1:], blob_id))
    c.close()
    s = Store.open(path)
    with pytest.raises(HarnevoError, match="the store is damaged"):
        s.trajectory(seed.behaviour_id, MODEL, "valid_seen", t.game, 0)
    s.close()


def test_infra_error_is_replaced_and_ok_is_final(store, seed):
    game = "pick_two_obj_and_place-CD-None-Drawer-304/trial_T2"
    bad = _traj(seed, random.Random(1), game=game, status=INFRA_ERROR, turns=3)
    store.record_episode(bad, model=MODEL)
    assert store.episode_count(status=INFRA_ERROR) == 1 and store.episode_count(status=OK) == 0
    bad2 = _traj(seed, random.Random(2), game=game, status=INFRA_ERROR, turns=2)
    store.record_episode(bad2, model=MODEL)
    assert store.trajectory(seed.behaviour_id, MODEL, "valid_seen", game, 0).to_dict() == bad2.to_dict()
    good = _traj(seed, random.Random(3), game=game)
    good.turns[0].cached, good.spent_usd = True, good.spent_usd - good.turns[0].spent_usd  # a cache hit is free
    good.turns[0].spent_usd = 0.0
    store.record_episode(good, model=MODEL)
    again = _traj(seed, random.Random(4), game=game)
    store.record_episode(again, model=MODEL)  # ok is final: a no-op
    late_infra = _traj(seed, random.Random(5), game=game, status=INFRA_ERROR)
    store.record_episode(late_infra, model=MODEL)
    assert store.episode_count() == 1 and store.episode_count(status=OK) == 1
    assert store.trajectory(seed.behaviour_id, MODEL, "valid_seen", game, 0).to_dict() == good.to_dict()
    rows = store.episodes(seed.behaviour_id, MODEL)
    assert list(rows) == [("valid_seen", game, 0)] and rows[("valid_seen", game, 0)].ok
    assert store.episodes(seed.behaviour_id, "other/model") == {}
    paid = bad.turns + bad2.turns + good.turns[1:]
    assert store.spend() == pytest.approx({  # replaced infra_error records were paid too; no-op records were not
        "usd": bad.spent_usd + bad2.spent_usd + good.spent_usd, "episodes": 3,
        "prompt_tokens": sum(t.prompt_tokens for t in paid),
        "completion_tokens": sum(t.completion_tokens for t in paid),
        "tokens": sum(t.prompt_tokens + t.completion_tokens for t in paid)})
    n_traj = store._db.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    assert n_traj == 1  # replaced trajectories are deleted, not left behind
    with pytest.raises(HarnevoError, match="not in the store; add_harness"):
        store.record_episode(make_trajectory(random.Random(1), harness_id="x", behaviour_id="abcdef0123456789",
                                             system="s", game="g"), model=MODEL)
    with pytest.raises(HarnevoError, match="status is one of"):
        store.episode_count(status="done")


# --- generations ----------------------------------------------------------------------------------
def test_generations_and_rng_state_continue_identically(store, seed, tmp_path):
    rng = random.Random(2024)
    rng.random(), rng.gauss(0, 1)  # gauss leaves a cached second value in the state
    state = rng_state_to_json(rng.getstate())
    assert state[2] is not None
    json.dumps(state)
    store.save_generation(0, population=[seed.behaviour_id], front=[seed.behaviour_id], rng_state=state,
                          stats={"best": 0.5, "evaluated": 8})
    expected = [rng.random() for _ in range(5)] + [rng.gauss(0, 1) for _ in range(3)]
    store.save_generation(1, population=[seed.behaviour_id], front=[], rng_state=rng_state_to_json(rng.getstate()),
                          stats={})
    path = store.path.parent
    store.close()
    s = Store.open(path)
    gens = s.generations()
    assert [g["generation"] for g in gens] == [0, 1] and s.last_generation()["generation"] == 1
    assert gens[0]["population"] == [seed.behaviour_id] and gens[0]["stats"] == {"best": 0.5, "evaluated": 8}
    restored = random.Random()
    restored.setstate(rng_state_from_json(gens[0]["rng_state"]))
    assert [restored.random() for _ in range(5)] + [restored.gauss(0, 1) for _ in range(3)] == expected
    with pytest.raises(HarnevoError, match="harness nope is not in the store"):
        s.save_generation(2, population=["nope"], front=[], rng_state=state, stats={})
    with pytest.raises(HarnevoError, match="rng_state"):
        s.save_generation(2, population=[], front=[], rng_state={1, 2}, stats={})
    with pytest.raises(HarnevoError, match="getstate"):
        rng_state_to_json("not a state")
    assert s.last_generation()["generation"] == 1
    s.close()
    empty = Store.create(tmp_path / "empty", CONFIG, VERSIONS)
    assert empty.last_generation() is None and empty.generations() == []
    empty.close()


# --- cost: bytes and time per episode --------------------------------------------------------------
def test_bytes_and_time_per_episode(tmp_path, seed):
    """300 realistic episodes (15 turns; 10 harnesses' 1,500-char system prompts; a ~2,000-char turn
    message that changes each turn; every episode a different room): bytes on disk per episode under
    20 KB (10,000 episodes under 200 MB), and record_episode well under 1% of an episode's time."""
    run = tmp_path / "run"
    s = Store.create(run, CONFIG, VERSIONS)
    empty_bytes = (run / STORE_FILE).stat().st_size
    rng = random.Random(99)
    harnesses = [with_genes(seed, {"memory.history_window": w}) for w in range(1, 11)]
    systems = [system_prompt(rng) for _ in harnesses]
    for h in harnesses:
        s.add_harness(h, parents=[], operator="seed", generation=0)
    trajs = [make_trajectory(rng, harness_id=h.id, behaviour_id=h.behaviour_id, system=systems[i % 10],
                             game=f"pick_and_place_simple-Obj-None-Recep-{i}/trial_T{i}", sample=i % 3)
             for i in range(300) for h in [harnesses[i % 10]]]
    msg = trajs[0].turns[7].messages
    assert 1300 <= len(msg[0]["content"]) <= 1700 and 1700 <= len(msg[1]["content"]) <= 2600
    raw = sum(len(json.dumps(t.to_dict())) for t in trajs) / len(trajs)
    times = []
    for t in trajs:
        start = time.perf_counter()
        s.record_episode(t, model=MODEL)
        times.append(time.perf_counter() - start)
    s.close()
    per_episode = ((run / STORE_FILE).stat().st_size - empty_bytes) / len(trajs)
    mean_ms, worst_ms = 1000 * sum(times) / len(times), 1000 * max(times)
    print(f"\nstore: {per_episode:,.0f} bytes/episode on disk (JSON {raw:,.0f}); 10,000 episodes ~ "
          f"{per_episode * 10_000 / 1e6:.0f} MB; record_episode mean {mean_ms:.2f} ms, worst {worst_ms:.2f} ms")
    assert per_episode < 20_000
    assert mean_ms < 50
    s = Store.open(run)
    assert s.episode_count() == 300 and s.integrity_ok()
    for t in trajs[::37]:
        assert s.trajectory(t.behaviour_id, MODEL, t.split, t.game, t.sample).to_dict() == t.to_dict()
    s.close()


# --- a writer killed mid-run --------------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import random, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_store import CONFIG, VERSIONS, MODEL, make_trajectory, system_prompt
    from harnevo.harness.spec import load_harness
    from harnevo.population import Store
    seed = load_harness("react")
    store = Store.create(Path({run!r}), CONFIG, VERSIONS)
    store.add_harness(seed, parents=[], operator="seed", generation=0)
    rng = random.Random(5)
    system = system_prompt(rng)
    report = open({report!r}, "a", buffering=1)
    i = 0
    while True:
        t = make_trajectory(rng, harness_id=seed.id, behaviour_id=seed.behaviour_id, system=system, game=f"g{{i}}")
        store.record_episode(t, model=MODEL)
        report.write(t.game + "\\n")  # written only after record_episode returned
        i += 1
""")


def test_sigkill_mid_run_loses_no_recorded_episode(tmp_path, seed):
    run, report = tmp_path / "run", tmp_path / "recorded.txt"
    script = CHILD.format(tests=str(Path(__file__).parent), run=str(run), report=str(report))
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)

    def wait_for(n: int) -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            if report.exists() and report.read_text().count("\n") >= n:
                return report.read_text().count("\n")
            time.sleep(0.01)
        raise AssertionError(child.stderr.read().decode()[-2000:] if child.poll() is not None else "too slow")

    try:
        seen = wait_for(30)
        reader = Store.open(run)  # another process reads while the writer writes (WAL)
        assert reader.episode_count(status=OK) >= seen and reader.integrity_ok()
        reader.close()
        wait_for(60)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    reported = report.read_text().split("\n")[:-1]  # a torn last line is not a report
    assert len(reported) >= 60
    s = Store.open(run)
    assert s.integrity_ok()
    rows = s.episodes(seed.behaviour_id, MODEL)
    missing = [g for g in reported if ("valid_seen", g, 0) not in rows]
    assert missing == []
    assert len(rows) >= len(reported)
    last = reported[-1]
    assert s.trajectory(seed.behaviour_id, MODEL, "valid_seen", last, 0).steps == 15
    s.close()
