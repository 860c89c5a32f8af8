"""The local `hf/` provider on a tiny random-init Qwen3-style checkpoint built in a temp dir (no hub)."""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from harnevo.errors import ModelNotFoundError  # noqa: E402
from harnevo.models import ReplyCache, get_model  # noqa: E402

MSGS = [
    {"role": "system", "content": "You are an agent in a household."},
    {"role": "user", "content": "You are in the middle of a room. Your task is to: put a clean apple in fridge."},
]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    from harnevo.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


def test_tiny_checkpoint_has_chat_template_and_assistant_mask(tiny_checkpoint):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint, local_files_only=True)
    out = tok.apply_chat_template(
        MSGS + [{"role": "assistant", "content": "Action: look"}],
        tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
    )
    assert 0 < sum(out["assistant_masks"]) < len(out["input_ids"])


def test_hf_model_completes_without_blocking_the_loop(tiny_checkpoint, monkeypatch):
    monkeypatch.chdir(tiny_checkpoint.parent)
    m = get_model(f"hf/{tiny_checkpoint.name}")  # a relative path
    assert m.name == f"hf/{tiny_checkpoint.name}" and not m.simulated and not m.priced
    assert m.litellm_model == "hf/" + str(tiny_checkpoint)  # hf//abs/path

    async def run():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.create_task(ticker())
        greedy = await m.complete(MSGS, temperature=0.0, max_tokens=12)
        greedy2 = await m.complete(MSGS, temperature=0.0, max_tokens=12)
        sampled = await m.complete(MSGS, temperature=1.0, max_tokens=5, sample=1)
        done.set()
        await t
        return greedy, greedy2, sampled, ticks

    greedy, greedy2, sampled, ticks = asyncio.run(run())
    assert isinstance(greedy.text, str) and greedy.text == greedy2.text  # greedy is deterministic
    assert greedy.usage.prompt_tokens > 10 and 0 < greedy.usage.completion_tokens <= 12
    assert 0 < sampled.usage.completion_tokens <= 5
    assert greedy.usage.cost_usd == 0.0
    assert ticks > 3  # the loop ran while the model generated


def test_hf_sampling_is_reproducible_per_sample_and_prompt(tiny_checkpoint):
    """temperature > 0 samples, seeded by the sample index and the prompt: a second model (a new run) gives the
    same reply for the same (prompt, sample), other samples draw other replies, greedy is untouched."""
    async def replies(samples):
        m = get_model(f"hf/{tiny_checkpoint}")
        return [(await m.complete(MSGS, temperature=1.0, max_tokens=12, sample=k)).text for k in samples]

    first = asyncio.run(replies(range(6)))
    again = asyncio.run(replies([3, 0, 5]))
    assert again == [first[3], first[0], first[5]]
    assert len(set(first)) >= 3  # a random-init model's vocabulary: six seeded draws are not one reply
    other = [{**MSGS[0]}, {"role": "user", "content": MSGS[1]["content"] + " Step 2."}]
    m = get_model(f"hf/{tiny_checkpoint}")
    assert asyncio.run(m.complete(other, temperature=1.0, max_tokens=12, sample=0)).text != first[0] or \
        asyncio.run(m.complete(other, temperature=1.0, max_tokens=12, sample=1)).text != first[1]


def test_hf_with_cache_and_price(tiny_checkpoint, tmp_path):
    with ReplyCache(tmp_path / "c.sqlite") as cache:
        m = get_model(f"hf/{tiny_checkpoint}", cache=cache, price=(1.0, 1.0))
        a = asyncio.run(m.complete(MSGS, max_tokens=4))
        b = asyncio.run(m.complete(MSGS, max_tokens=4))
        assert not a.cached and b.cached and a.text == b.text and a.usage.cost_usd > 0
        assert m.cache_name.startswith(f"hf/{tiny_checkpoint}@")


def test_missing_checkpoint(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no transformers checkpoint"):
        get_model(f"hf/{tmp_path / 'nope'}")
    with pytest.raises(ModelNotFoundError):
        get_model("hf/")
