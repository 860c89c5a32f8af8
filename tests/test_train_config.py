"""The training stages' configs: unknown keys are errors, bad values give one line, the profiles' defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnevo.errors import HarnevoError
from harnevo.train.config import CollectConfig, DistillConfig, GRPOConfig, SFTConfig, load_config


def test_unknown_key_in_a_file_or_a_flag_is_an_error(tmp_path):
    f = tmp_path / "sft.yaml"
    f.write_text("data: d\nbase: b\nout: o\nlearning_rate: 0.1\n")
    with pytest.raises(HarnevoError, match="unknown key 'learning_rate'") as e:
        load_config(SFTConfig, f)
    assert "\n" not in str(e.value) and str(f) in str(e.value)
    with pytest.raises(HarnevoError, match="unknown key 'rewards.sucess'"):
        load_config(GRPOConfig, None, dict(init="i", harness="minimal", out="o", rewards={"sucess": 3}))


@pytest.mark.parametrize("cls,values,match", [
    (SFTConfig, dict(data="d", base="b", out="o", lr=-1), "'lr': Input should be greater than 0"),
    (SFTConfig, dict(data="d", base="b", out="o", profile="huge"), "'profile'"),
    (SFTConfig, dict(base="b", out="o"), "missing key 'data'"),
    (GRPOConfig, dict(init="i", harness="h", out="o", num_generations=1), "'num_generations'"),
    (CollectConfig, dict(harness="h", out="o", split="train", generate=5), "either split"),
    (DistillConfig, dict(harness="h", supervisor="s", student="t", out="o", games=0), "'games'"),
    (CollectConfig, dict(harness="h", out="o", teacher="sim/bounded", perturb=0.2), "expert teacher only"),
    (CollectConfig, dict(harness="h", out="o", perturb=1.0), "'perturb'"),
])
def test_bad_values_give_one_line(cls, values, match):
    with pytest.raises(HarnevoError, match=match) as e:
        load_config(cls, None, values)
    assert "\n" not in str(e.value)


def test_bad_files_give_one_line(tmp_path):
    with pytest.raises(HarnevoError, match="config file not found"):
        load_config(SFTConfig, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(HarnevoError, match="a YAML mapping"):
        load_config(SFTConfig, bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n")
    with pytest.raises(HarnevoError, match="not valid YAML") as e:
        load_config(SFTConfig, broken)
    assert "\n" not in str(e.value)


def test_sft_profiles_and_flags_over_the_file(tmp_path):
    q = SFTConfig.from_profile("qwen3-8b", data="d", base="Qwen/Qwen3-8B", out="o")
    assert (q.lora, q.lora_r, q.lora_alpha, q.lora_target, q.lr, q.scheduler, q.warmup_ratio, q.epochs,
            q.max_length, q.batch_size * q.grad_accum) == (True, 64, 128, "all-linear", 1e-5, "cosine", 0.1, 4.0,
                                                           4096, 16)
    default = load_config(SFTConfig, None, dict(data="d", base="b", out="o"))
    assert default.profile == "qwen3-8b" and default.lora_r == 64
    tiny = SFTConfig.from_profile("tiny", data="d", base="b", out="o")
    assert not tiny.lora and tiny.bf16 is False and tiny.max_steps > 0
    f = tmp_path / "c.yaml"
    f.write_text("profile: tiny\ndata: d\nbase: b\nout: o\nlr: 0.01\n")
    c = load_config(SFTConfig, f, {"lr": 0.02, "max_steps": None})  # None: a flag not given
    assert c.lr == 0.02 and c.max_steps == tiny.max_steps and c.data == Path("d")


def test_grpo_defaults_are_evoharness_rl_weights():
    g = load_config(GRPOConfig, None, dict(init="i", harness="minimal", out="o"))
    w = g.rewards
    assert (w.success, w.efficiency, w.spam, w.spam_cap, w.invalid) == (10.0, 1.0, 0.1, 10, 0.1)
    assert g.num_generations >= 2 and g.beta == 0.0
