"""Perturbed expert collection (DART): some turns take a random admissible `go to`, the expert recovers,
perturbed turns give no row, and the same seed gives the same episodes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("datasets")


def _collect(alfworld_data, out, perturb):
    from harnevo.train.collect import run_collect
    from harnevo.train.config import CollectConfig

    cfg = CollectConfig(harness="react", teacher="expert", split="valid_train", data=alfworld_data, games=3,
                        samples=2, out=out, max_steps=30, workers=1, concurrency=2, perturb=perturb)
    return run_collect(cfg, log=lambda m: None)


def _episodes(out):
    return {r["key"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}


def test_perturbed_turns_give_no_row_and_the_expert_recovers(alfworld_data, tmp_path):
    plain = _collect(alfworld_data, tmp_path / "plain", 0.0)
    noisy = _collect(alfworld_data, tmp_path / "noisy", 0.3)
    eps = _episodes(tmp_path / "noisy")
    assert sum(r["perturbed"] for r in eps.values()) > 0
    assert all(r["perturbed"] == 0 for r in _episodes(tmp_path / "plain").values())
    won = [r for r in eps.values() if r["success"]]
    assert won, "the expert recovered from none of its perturbed episodes"
    for r in won:  # every turn gives a row except the perturbed ones (react has no meta-actions)
        assert len(r["rows"]) == r["steps"] - r["perturbed"]
        for row in r["rows"]:  # a target is never a perturbation: the expert's plan at that turn
            assert row["completion"][0]["content"].rsplit("Action: ", 1)[1]
    # the two samples of a game are perturbed differently; without perturbation they are the same episode
    by_game = {}
    for r in eps.values():
        by_game.setdefault(r["game"], []).append([row["completion"][0]["content"] for row in r["rows"]])
    assert any(len(v) == 2 and v[0] != v[1] for v in by_game.values() if all(v))
    m = json.loads((tmp_path / "noisy" / "manifest.json").read_text())
    assert m["inputs"]["perturb"] == 0.3 and m["perturbed_turns"] == sum(r["perturbed"] for r in eps.values())
    assert noisy["rows"] == sum(len(r["rows"]) for r in eps.values())
    assert plain["success_rate"] >= noisy["success_rate"] - 0.5

    again = _collect(alfworld_data, tmp_path / "again", 0.3)  # the same seed: the same episodes
    assert again["rows"] == noisy["rows"]
    assert {k: r["rows"] for k, r in _episodes(tmp_path / "again").items()} == {k: r["rows"] for k, r in eps.items()}


def test_a_complete_collection_run_again_is_left_as_it_is(alfworld_data, tmp_path):
    """Re-running a finished collect plays nothing and rewrites nothing: the digest of its manifest, which the
    next stage (sft) records as its input, stays valid, so the chain resumes instead of refusing its folders."""
    from harnevo.train.manifest import digest

    first = _collect(alfworld_data, tmp_path / "c", 0.0)
    before = digest(tmp_path / "c"), (tmp_path / "c" / "episodes.jsonl").read_bytes()
    again = _collect(alfworld_data, tmp_path / "c", 0.0)
    assert (digest(tmp_path / "c"), (tmp_path / "c" / "episodes.jsonl").read_bytes()) == before
    assert again["rows"] == first["rows"] and again["complete"]
