"""`harnevo report RUN` on a tiny evolution (sim/bounded, four short generated games): the page is one
self-contained HTML file whose every plot is an embedded PNG, with no network reference; it shows the front
table, the lineage of the best (the same best as the run's) and its diff against its seed; the same run gives
the same bytes; a run in progress (killed mid-generation, or before its first generation was saved) is
reported as far as it got; bad input is one line and exit 2."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

PLOTS = ("success_per_generation", "front", "families", "episodes")


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harnevo.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    from harnevo.envs.generate import generate

    root = tmp_path_factory.mktemp("report-games")
    generate(root, 4, families=["pick", "look", "heat", "cool"], seed=5, split="generated", workers=2)
    return root


@pytest.fixture(scope="module")
def run(games, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("report-run") / "r"
    r = _cli("evolve", "--model", "sim/bounded", "--seeds", "react,bpe_always_on", "--split", "generated",
             "--games", "4", "--population", "4", "--generations", "2", "--minibatch", "2", "--max-steps", "15",
             "--seed", "3", "--concurrency", "4", "--workers", "2", "--data", str(games), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


class Page(HTMLParser):
    """What the checks need from a page: every tag with its attributes, the text under each h2, all text."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.sections: dict[str, str] = {}
        self.text: list[str] = []
        self._h2: str | None = None
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "h2":
            self._in_h2, self._h2 = True, ""

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False
            self.sections[self._h2] = ""

    def handle_data(self, data):
        self.text.append(data)
        if self._in_h2:
            self._h2 += data
        elif self._h2 is not None:
            self.sections[self._h2] += data


def _parse(index: Path) -> Page:
    p = Page()
    p.feed(index.read_text(encoding="utf-8"))
    p.close()
    return p


def _check_self_contained(page: Page, folder: Path) -> None:
    imgs = [a for t, a in page.tags if t == "img"]
    assert len(imgs) == len(PLOTS)
    for a, name in zip(imgs, PLOTS):
        prefix = "data:image/png;base64,"
        assert a["src"].startswith(prefix), a["src"][:40]
        png = base64.b64decode(a["src"][len(prefix):], validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and png == (folder / f"{name}.png").read_bytes()
    assert not [t for t, _ in page.tags if t in ("script", "link", "iframe", "object", "embed")]
    for tag, attrs in page.tags:  # nothing fetched or linked from anywhere
        for k, v in attrs.items():
            assert not (v or "").lower().lstrip().startswith(("http:", "https:", "//")), (tag, k, v)
    assert "http://" not in "".join(page.text) and "https://" not in "".join(page.text)


def test_report_of_a_finished_run(run):
    r = _cli("report", str(run))
    assert r.returncode == 0, r.stderr[-3000:]
    folder = run / "report"
    assert "index.html" in r.stdout and "finished" in r.stdout
    page = _parse(folder / "index.html")
    _check_self_contained(page, folder)
    data = json.loads((folder / "report.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert data["best"] == summary["best"] and data["state"]["finished"] is True  # the run's own best
    assert data["simulated"] is True and "[simulated model]" in "".join(page.text)
    # the front table: every member of the run's front, the best marked
    front = next(v for k, v in page.sections.items() if k.startswith("The front"))
    assert all(m["behaviour_id"] in front for m in summary["front"]) and "best" in front
    assert "success [95% CI]" in front
    # the lineage: from a seed to the best, each step with its operator
    lineage = page.sections["Lineage of the best harness"]
    assert summary["best"] in lineage and "made by seed" in lineage
    assert data["lineage"][0]["operator"] == "seed" and data["lineage"][-1]["behaviour_id"] == summary["best"]
    assert all(f"made by {s['operator']}" in lineage for s in data["lineage"])
    # the diff against that seed (empty when the best is the seed itself)
    diff = page.sections["The best against its seed"]
    assert data["diff"]["seed"] == data["lineage"][0]["behaviour_id"]
    assert ("nothing changed" in diff) if data["diff"]["seed"] == data["best"] else ("@@" in diff)
    # per generation: every saved generation with the best's interval and the episodes racing saved
    gens = data["generations"]
    assert [g["generation"] for g in gens] == [0, 1, 2] and not any(g["in_progress"] for g in gens)
    assert all(g["best_ci95"][0] <= g["best_success"] <= g["best_ci95"][1] for g in gens)
    assert sum(g["episodes_played"] for g in gens) == summary["episodes_in_store"]
    assert sum(g["saved_by_racing"] for g in gens) == summary["episodes_saved_by_racing"]


def test_the_same_run_gives_the_same_report(run, tmp_path):
    from harnevo.report.run_report import write_report

    a = write_report(run, tmp_path / "a")
    b = write_report(run, tmp_path / "b")
    for name in ["index.html", "report.json"] + [f"{p}.png" for p in PLOTS]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert a["report"] == b["report"]


def _copy_run(run: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in run.iterdir():
        if f.name.startswith("population.sqlite"):
            shutil.copy2(f, dest / f.name)
    return dest


def _cut(run_dir: Path, *, keep_generations: int, keep_harnesses_upto: int, drop_half_of: int | None) -> None:
    """Make the store look as a run killed mid-way leaves it: later generation rows missing, the harnesses of
    the generation being evaluated registered with part of their episodes recorded."""
    db = sqlite3.connect(run_dir / "population.sqlite")
    with db:
        db.execute("DELETE FROM generations WHERE generation >= ?", (keep_generations,))
        late = [r[0] for r in db.execute("SELECT behaviour_id FROM harnesses WHERE generation > ?",
                                         (keep_harnesses_upto,))]
        for bid in late:
            db.execute("DELETE FROM evaluations WHERE behaviour_id = ?", (bid,))
            db.execute("DELETE FROM harnesses WHERE behaviour_id = ?", (bid,))
        if drop_half_of is not None:
            ids = db.execute("SELECT behaviour_id FROM harnesses WHERE generation = ?", (drop_half_of,)).fetchall()
            for (bid,) in ids:
                keys = db.execute("SELECT game FROM evaluations WHERE behaviour_id = ? ORDER BY game",
                                  (bid,)).fetchall()
                for (game,) in keys[len(keys) // 2:]:
                    db.execute("DELETE FROM evaluations WHERE behaviour_id = ? AND game = ?", (bid, game))
    db.close()


def test_report_of_a_run_in_progress(run, tmp_path):
    """Killed (or still running) during generation 2: generations 0-1 saved, generation 2's candidates
    registered, half of their episodes recorded. The run's lock is held meanwhile, as a live run holds it."""
    from harnevo.files import FolderLock

    live = _copy_run(run, tmp_path / "live")
    _cut(live, keep_generations=2, keep_harnesses_upto=2, drop_half_of=2)
    with FolderLock(live, "run"):
        r = _cli("report", str(live))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "in progress" in r.stdout
    folder = live / "report"
    page = _parse(folder / "index.html")
    _check_self_contained(page, folder)
    assert "Run in progress" in "".join(page.text)
    data = json.loads((folder / "report.json").read_text())
    st = data["state"]
    assert st["finished"] is False and st["last_generation"] == 1 and st["pending_generation"] == 2
    db = sqlite3.connect(live / "population.sqlite")
    gen2 = {r[0] for r in db.execute("SELECT behaviour_id FROM harnesses WHERE generation = 2")}
    db.close()
    assert set(st["pending_candidates"]) == gen2
    assert data["generations"][-1] == {**data["generations"][-1], "generation": 2, "in_progress": True}
    scored = {c["behaviour_id"]: c for c in data["candidates"]}
    assert any(scored[b]["in_progress"] for b in gen2 if b in scored)  # their games so far
    assert data["best"] is not None and data["best_provisional"] is False and data["lineage"]


def test_report_before_the_first_generation_is_saved(run, tmp_path):
    early = _copy_run(run, tmp_path / "early")
    _cut(early, keep_generations=0, keep_harnesses_upto=0, drop_half_of=0)
    r = _cli("report", str(early), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    page = _parse(tmp_path / "out" / "index.html")
    _check_self_contained(page, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["state"]["last_generation"] is None and data["state"]["pending_generation"] == 0
    assert data["best_provisional"] is True and "provisional" in "".join(page.text)
    assert [g["generation"] for g in data["generations"]] == [0] and data["generations"][0]["in_progress"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    def one_line(r, needle):
        assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert needle in r.stderr, r.stderr

    one_line(_cli("report", str(tmp_path / "nope")), "no run folder")
    (tmp_path / "plain").mkdir()
    one_line(_cli("report", str(tmp_path / "plain")), "not an evolution run")
    from harnevo.errors import HarnevoError
    from harnevo.report.run_report import write_report

    (tmp_path / "file").write_text("x")
    with pytest.raises(HarnevoError, match="is a file"):
        write_report(tmp_path / "file")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "population.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(HarnevoError, match="population.sqlite"):
        write_report(tmp_path / "broken")
    assert not (tmp_path / "broken" / "report").exists()


def test_the_mutators_evidence_is_shown_escaped(run, tmp_path):
    """A lineage step whose detail holds a reflection (what the reflective mutator saw and proposed) shows it,
    escaped: text from a run never becomes markup."""
    from harnevo.report.run_report import write_report

    copy = _copy_run(run, tmp_path / "refl")
    best = json.loads((run / "summary.json").read_text())["best"]
    db = sqlite3.connect(copy / "population.sqlite")
    with db:
        (detail,) = db.execute("SELECT detail FROM harnesses WHERE behaviour_id = ?", (best,)).fetchone()
        d = json.loads(detail)
        d["reflection"] = {"gene": "prompt.text.instruction", "families": ["heat"],
                           "evidence": ["turn 4: <script>alert(1)</script> went to fridge 1 instead of microwave 1"],
                           "proposal": "Heat things in the microwave.", "tokens": 812}
        db.execute("UPDATE harnesses SET detail = ? WHERE behaviour_id = ?", (json.dumps(d), best))
    db.close()
    out = write_report(copy)
    page = _parse(out["index"])
    assert not [t for t, _ in page.tags if t == "script"]
    lineage = page.sections["Lineage of the best harness"]
    assert "mutator evidence and proposal" in lineage and "<script>alert(1)</script> went to fridge 1" in lineage
    assert "Heat things in the microwave." in lineage
    step = out["report"]["lineage"][-1]
    assert step["behaviour_id"] == best and step["reflection"]["tokens"] == 812
