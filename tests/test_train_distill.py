"""Supervisor distillation: sim/bounded supervises a tiny random-init student acting under `minimal`; the
dataset's targets are all admissible actions; intervention rate and success with/without are reported."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("datasets")
pytest.importorskip("transformers")

from harnevo.train.config import DistillConfig, load_config  # noqa: E402
from harnevo.train.common import default_thought  # noqa: E402
from harnevo.train.distill import run_distill, same_prompt_program  # noqa: E402


def _admissible(user_message: str) -> list[str]:
    lines = user_message.split("## Admissible actions\n", 1)[1].splitlines()
    return lines[0].split(" | ")


def test_distill_writes_admissible_targets_and_reports_interventions(alfworld_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    from harnevo.models.tiny import build_tiny_checkpoint

    student = build_tiny_checkpoint(tmp_path / "student")
    out = tmp_path / "distill"
    cfg = load_config(DistillConfig, None, dict(harness="bpe_always_on", supervisor="sim/bounded",
                                                student=f"hf/{student}", data=alfworld_data, split="valid_seen",
                                                games=2, max_steps=8, out=out, workers=2))
    logs: list[str] = []
    s = run_distill(cfg, log=logs.append)
    from datasets import load_from_disk

    ds = load_from_disk(str(out / "dataset"))
    assert len(ds) == s["rows"] > 0
    for r in ds:
        assert [m["role"] for m in r["prompt"]] == ["system", "user"]
        action = r["completion"][0]["content"].removeprefix("Action: ")
        assert action in _admissible(r["prompt"][1]["content"]), action
        assert "## History" not in r["prompt"][1]["content"]  # the student's own (minimal) context
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and 0.0 <= m["intervention_rate"] <= 1.0 and m["reviewed"] >= len(ds)
    assert set(m["intervention_rate_per_episode"]) and m["success_student_alone"] is not None
    assert m["success_with_supervisor"] >= m["success_student_alone"]
    assert any("replaced" in line for line in logs)
    again: list[str] = []
    run_distill(cfg, log=again.append)  # resumes: nothing left to play
    assert not any("to play" in line for line in again)


def test_dagger_runs_the_students_commands_and_labels_them_with_the_supervisors(alfworld_data, tmp_path):
    """supervisor_executes=0: every admissible command the student proposes is the one that runs, and each
    row's target is the supervisor's command for that state (DAgger); the student acts under `react`."""
    out = tmp_path / "dagger"
    cfg = load_config(DistillConfig, None, dict(harness="react", supervisor="sim/bounded?lapse=0", student="sim/random",
                                                student_harness="react", data=alfworld_data, split="valid_seen",
                                                games=1, max_steps=10, out=out, workers=1, baseline=False,
                                                supervisor_executes=0.0))
    s = run_distill(cfg, log=lambda m: None)
    from datasets import load_from_disk

    ds = load_from_disk(str(out / "dataset"))
    assert len(ds) == s["rows"] == 10
    ran = [r["proposed"].split("Action: ", 1)[1].strip() for r in ds]
    targets = [r["completion"][0]["content"].split("Action: ", 1)[1] for r in ds]
    differs = [i for i, (a, t) in enumerate(zip(ran, targets)) if a != t]
    assert differs, "a random student and the bounded supervisor agreed on every turn"
    assert all(ds[i]["supervisor"] == f"labelled; the student's '{ran[i]}' ran" for i in differs)
    # what ran is the student's: the next prompt's history shows it
    for i in range(len(ds) - 1):
        assert f"> {ran[i]}\n" in ds[i + 1]["prompt"][1]["content"]
    # supervisor and student see the same prompts (react): each target carries the supervisor's own thought,
    # as a collect row does, not a gloss of the command
    thoughts = [r["completion"][0]["content"].split("\n", 1)[0] for r in ds]
    assert all(t.startswith("Think: ") for t in thoughts)
    assert not any(t == f"Think: {default_thought(a)}" for t, a in zip(thoughts, targets)), thoughts
    m = json.loads((out / "manifest.json").read_text())
    assert m["inputs"]["supervisor_executes"] == 0.0 and m["reviewed"] == 10


def test_the_supervisors_thought_is_kept_only_when_it_sees_what_the_student_sees():
    from harnevo.harness.spec import load_harness

    react = load_harness("react")
    assert same_prompt_program(react, react.evolve(model={"temperature": 0.7, "max_tokens": 64}))
    assert not same_prompt_program(load_harness("bpe_always_on"), react)
    assert not same_prompt_program(react, react.evolve(memory={"history_window": 3}))

