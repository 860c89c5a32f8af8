"""The results folder and the aggregates, without the engine: lock, schema versions, atomic writes,
clustered intervals, honest statuses, and the fixed order in which lessons enter the bank."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading

import pytest

from harnevo.errors import HarnevoError
from harnevo.files import FolderLock, atomic_write
from harnevo.harness.experience import ExperienceBank
from harnevo.runtime.bankorder import BankSchedule
from harnevo.runtime.results import ResultsDir
from harnevo.runtime.summary import summarize, wilson
from harnevo.runtime.trajectory import SCHEMA_VERSION, Trajectory


def _traj(game: str, success: bool, *, sample: int = 0, status: str = "ok", reason: str = "") -> Trajectory:
    return Trajectory(key=f"b|m|valid_seen|{game}|{sample}", harness_id="h", harness_name="n", model="m",
                      simulated=True, split="valid_seen", game=game, game_path="/x", family="pick", sample=sample,
                      status=status, success=success, reason=reason or ("won" if success else "step budget exhausted"))


def test_second_writer_is_refused_with_one_line(tmp_path):
    with FolderLock(tmp_path / "out", "results folder"):
        FolderLock(tmp_path / "out").acquire().release()  # re-entrant within one process
        other = subprocess.run([sys.executable, "-c", "import sys; from harnevo.files import FolderLock\n"
                                f"FolderLock({str(tmp_path / 'out')!r}).acquire()"], capture_output=True, text=True)
        assert other.returncode == 1 and "in use by another harnevo process" in other.stderr
        # another process through the CLI: exit 2 at once, one line, nothing written
        r = subprocess.run([sys.executable, "-m", "harnevo.cli", "apply", "react", "--model", "sim/bounded",
                            "--games", "1", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "in use" in r.stderr
        assert not (tmp_path / "out" / "trajectories.jsonl").exists()
    FolderLock(tmp_path / "out").acquire().release()  # released: free again


def test_atomic_write_uses_a_temp_file_of_its_own(tmp_path):
    target = tmp_path / "f.json"
    errors = []

    def writer(i: int) -> None:
        try:
            for j in range(50):
                atomic_write(target, json.dumps({"writer": i, "j": j, "pad": "x" * 5000}))
        except Exception as e:  # a shared temp name makes os.replace fail or tear a file
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(target.read_text())["j"] == 49
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temp file left behind


def test_schema_v1_lines_are_migrated_newer_ones_refused(tmp_path):
    rd = ResultsDir(tmp_path)
    v1 = {**_traj("g1", False, reason="engine error: worker died").to_dict(), "schema": 1}
    for k in ("status", "spent_usd", "behaviour_id", "bank_edits", "bank_seen", "supervisor_interventions"):
        v1.pop(k)
    ok1 = {**_traj("g2", True).to_dict(), "schema": 1}
    for k in ("status", "spent_usd", "behaviour_id", "bank_edits", "bank_seen", "supervisor_interventions"):
        ok1.pop(k)
    rd.trajectories.write_text(json.dumps(v1) + "\n" + json.dumps(ok1) + "\n")
    done = rd.load()
    assert done["b|m|valid_seen|g1|0"].status == "infra_error"  # an engine error in v1 was infrastructure
    assert done["b|m|valid_seen|g2|0"].status == "ok" and done["b|m|valid_seen|g2|0"].schema == SCHEMA_VERSION
    rd.trajectories.write_text(json.dumps({**ok1, "schema": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(HarnevoError, match="schema"):
        rd.load()
    rd.trajectories.write_text(json.dumps(ok1) + "\n{not json\n" + json.dumps(ok1) + "\n")
    with pytest.raises(HarnevoError, match="line 2 is not valid JSON"):
        rd.load()
    rd.trajectories.write_text(json.dumps(ok1) + "\n" + json.dumps(ok1)[:40])  # torn last line: cut
    assert len(rd.load()) == 1 and rd.trajectories.read_text().endswith("\n")


def test_infra_errors_never_count_and_samples_cluster_by_game():
    trajs = [_traj("g1", True), _traj("g2", False), _traj("g3", False, status="infra_error",
                                                             reason="model call failed: 500")]
    s = summarize(trajs, model="m")
    assert s["success_rate"] == 0.5 and s["games"] == 2 and s["infra_errors"] == 1
    assert s["infra_error_reasons"] == {"model call failed": 1}
    assert "model call failed" not in s["failure_reasons"]
    # three identical samples per game (temperature 0) are one observation per game, not three
    triple = [_traj(g, ok, sample=k) for g, ok in (("g1", True), ("g2", False)) for k in range(3)]
    t = summarize(triple, model="m")
    assert t["games"] == 2 and t["episodes"] == 6 and t["success_rate"] == 0.5
    assert t["ci95"] == list(wilson(1, 2)) and t["ci95"] != list(wilson(3, 6))


def test_bank_schedule_is_independent_of_finishing_order():
    """Each episode reads base + the edits of episodes 0..i-lag in game order, whatever order they finish in."""
    order = [f"e{i}" for i in range(12)]

    async def run(finish_order, lag):
        sched = BankSchedule(ExperienceBank(None, size=50), order, lag=lag)
        for k in order:
            sched.need(k)
        seen = {}

        async def episode(k):
            snap = await sched.snapshot_for(k)
            seen[k] = [l.text for l in snap.lessons]
            await asyncio.sleep(0.001 * finish_order.index(k))
            sched.settle(k, [{"op": "add", "text": f"lesson of {k}"}])

        await asyncio.gather(*(episode(k) for k in order))
        return seen, [l.text for l in sched.bank.lessons]

    a = asyncio.run(run(order, 3))
    shuffled = order[:]
    random.Random(5).shuffle(shuffled)
    b = asyncio.run(run(shuffled, 3))
    assert a == b
    seen, final = a
    assert seen["e0"] == seen["e2"] == [] and seen["e3"] == ["lesson of e0"]
    assert seen["e11"] == [f"lesson of e{i}" for i in range(9)]
    assert final == [f"lesson of e{i}" for i in range(12)]


def test_frozen_bank_is_read_never_written():
    base = ExperienceBank(None, size=5)
    base.add("apples are on countertops")
    sched = BankSchedule(base, ["a", "b"], lag=1, frozen=True)
    snap = asyncio.run(sched.snapshot_for("b"))
    sched.settle("a", [{"op": "add", "text": "never"}])
    assert [l.text for l in snap.lessons] == ["apples are on countertops"]
    assert [l.text for l in sched.bank.lessons] == ["apples are on countertops"]
