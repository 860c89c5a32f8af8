"""The training chain on CPU with a tiny random-init model built here: collect with the expert on 6 official
games -> SFT a few dozen steps with falling loss -> GRPO for 2 updates on real ALFWorld episodes with short
step limits -> `harnevo apply minimal --model hf/<out>` plays. Everything through the CLI; resumes checked."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from typer.testing import CliRunner  # noqa: E402

from harnevo.cli import app  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TQDM_DISABLE", "1"), ("TRL_EXPERIMENTAL_SILENCE", "1"),
                 ("TOKENIZERS_PARALLELISM", "false")):
        monkeypatch.setenv(k, v)


def _run(args):
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_collect_sft_grpo_apply_chain(alfworld_data, tmp_path):
    import torch

    torch.set_num_threads(1)
    from harnevo.models.tiny import build_tiny_checkpoint

    base = build_tiny_checkpoint(tmp_path / "base")
    data, sft, grpo = tmp_path / "data", tmp_path / "sft", tmp_path / "grpo"
    games = ["--data", str(alfworld_data), "--split", "valid_train", "--games", "6", "--workers", "2"]

    out = _run(["train", "collect", "--harness", "minimal", "--teacher", "expert", "--out", str(data), *games])
    m = json.loads((data / "manifest.json").read_text())
    assert m["complete"] and m["teacher"] == "expert" and m["games"] == 6 and m["rows"] > 20
    assert m["harness"] == "minimal" and m["harness_id"] and 0.5 <= m["success_rate"] <= 1.0 and m["tokens"] > 0
    from datasets import load_from_disk

    ds = load_from_disk(str(data / "dataset"))
    row = ds[0]
    assert [x["role"] for x in row["prompt"]] == ["system", "user"] and row["completion"][0]["role"] == "assistant"
    assert row["completion"][0]["content"].startswith("Action: ")
    assert all(r["completion"][0]["content"][len("Action: "):] in r["prompt"][1]["content"] for r in ds)
    assert "nothing to play" not in out
    again = _run(["train", "collect", "--harness", "minimal", "--teacher", "expert", "--out", str(data), *games])
    assert "episode(s) to play" not in again  # resumed: every episode was already recorded

    _run(["train", "sft", "--data", str(data), "--base", str(base), "--profile", "tiny", "--max-steps", "30",
          "--out", str(sft)])
    losses = [json.loads(line)["loss"] for line in (sft / "loss.jsonl").read_text().splitlines()]
    assert len(losses) >= 25
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5  # the loss falls
    sm = json.loads((sft / "manifest.json").read_text())
    assert sm["complete"] and sm["inputs"]["base"] == str(base) and sm["inputs"]["data_manifest"]
    assert (sft / "config.json").is_file() and (sft / "tokenizer_config.json").is_file()
    assert "nothing to do" in _run(["train", "sft", "--data", str(data), "--base", str(base), "--profile", "tiny",
                                    "--max-steps", "30", "--out", str(sft)])

    _run(["train", "grpo", "--init", str(sft), "--harness", "minimal", "--out", str(grpo), "--data",
          str(alfworld_data), "--split", "valid_train", "--games", "2", "-G", "2", "--games-per-update", "2",
          "--max-steps", "2", "--max-steps-episode", "3", "--lr", "1e-4", "--workers", "2"])
    updates = [json.loads(line) for line in (grpo / "updates.jsonl").read_text().splitlines()]
    assert len(updates) == 2
    for u in updates:
        assert {"reward", "success", "steps", "meta_actions", "invalid_replies"} <= set(u)
        assert 0 < u["steps"] <= 3 and u["meta_actions"] == 0
    rollouts = [json.loads(line) for line in (grpo / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * 2 * 2 and all(r["status"] == "ok" for r in rollouts)
    gm = json.loads((grpo / "manifest.json").read_text())
    assert gm["complete"] and gm["updates"] == 2 and gm["inputs"]["init"] == str(sft)

    res = tmp_path / "apply"
    _run(["apply", "minimal", "--model", f"hf/{grpo}", "--data", str(alfworld_data), "--split", "valid_seen",
          "--games", "1", "--max-steps", "3", "--workers", "1", "--no-cache", "--out", str(res)])
    summary = json.loads((res / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["model"] == f"hf/{grpo}" and summary["harness_name"] == "minimal"
    traj = json.loads((res / "trajectories.jsonl").read_text().splitlines()[0])
    assert traj["status"] == "ok" and 1 <= traj["steps"] <= 3


def _toy_dataset(path):
    from datasets import Dataset

    rows = [{"prompt": [{"role": "system", "content": "Reply with one line: Action: <command>"},
                        {"role": "user", "content": f"## Task\nYour task is to: put a mug in cabinet.\nStep {i}"}],
             "completion": [{"role": "assistant", "content": f"Action: go to cabinet {i % 3 + 1}"}]} for i in range(8)]
    Dataset.from_list(rows).save_to_disk(str(path / "dataset"))
    return path


def test_sft_lora_writes_the_merged_model_and_the_adapter(tmp_path):
    from transformers import AutoModelForCausalLM

    from harnevo.models.tiny import build_tiny_checkpoint
    from harnevo.train.config import SFTConfig
    from harnevo.train.sft import run_sft

    base = build_tiny_checkpoint(tmp_path / "base")
    data = _toy_dataset(tmp_path / "data")
    cfg = SFTConfig.from_profile("tiny", data=data, base=str(base), out=tmp_path / "lora", lora=True, lora_r=4,
                                 lora_alpha=8, max_steps=4, batch_size=2)
    s = run_sft(cfg, log=lambda *_: None)
    assert s["written"] == {"adapter": str(tmp_path / "lora" / "adapter"), "model": str(tmp_path / "lora")}
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "lora", local_files_only=True)  # what hf/<out> loads
    assert not any("lora" in n for n, _ in model.named_parameters())


def test_bad_inputs_are_one_line_errors(tmp_path):
    from harnevo.errors import HarnevoError
    from harnevo.train.config import SFTConfig
    from harnevo.train.sft import run_sft

    with pytest.raises(HarnevoError, match="no dataset there"):
        run_sft(SFTConfig.from_profile("tiny", data=tmp_path, base="x", out=tmp_path / "o"))
    data = _toy_dataset(tmp_path / "data")
    with pytest.raises(HarnevoError, match="no transformers checkpoint"):
        run_sft(SFTConfig.from_profile("tiny", data=data, base=str(tmp_path), out=tmp_path / "o"))
    with pytest.raises(HarnevoError, match="no such .gguf file"):
        run_sft(SFTConfig.from_profile("tiny", data=data, base=str(tmp_path / "m.gguf"), out=tmp_path / "o"))
    result = CliRunner().invoke(app, ["train", "sft", "--data", str(data), "--base", "b", "--out", "o",
                                      "--profile", "huge"])
    assert result.exit_code != 0 and isinstance(result.exception, HarnevoError)
