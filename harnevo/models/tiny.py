"""A tiny random-init Qwen3-style causal LM and tokenizer, built locally with no hub access.

For tests, benchmarks and dry runs of the training stage: `build_tiny_checkpoint(out_dir)` trains a
byte-level BPE tokenizer on a few hundred lines of ALFWorld-style text (well under a second), wraps it
in a `PreTrainedTokenizerFast` with a Qwen-style ChatML chat template (assistant turns wrapped in
`{% generation %}` so assistant-only losses work), builds a `Qwen3Config` model (hidden 64, 2 layers,
~0.1M parameters, tied embeddings) from a fixed seed, and `save_pretrained`s both to `out_dir`.
Its replies are noise; what it proves is the path.
"""

from __future__ import annotations

import os
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_OBJECTS = ["apple", "mug", "knife", "plate", "bowl", "egg", "lettuce", "tomato", "potato", "bread", "cup",
            "pan", "pot", "spatula", "book", "cd", "pencil", "pen", "keychain", "cellphone", "towel", "soapbar",
            "candle", "vase", "watch", "pillow", "laptop", "creditcard", "spraybottle", "statue"]
_RECEPTACLES = ["cabinet", "countertop", "drawer", "fridge", "microwave", "sinkbasin", "stoveburner", "shelf",
                "desk", "bed", "sofa", "sidetable", "diningtable", "garbagecan", "toilet", "bathtubbasin",
                "dresser", "armchair", "coffeetable", "safe"]
_VERBS = ["go to", "take", "put", "open", "close", "heat", "cool", "clean", "examine", "use", "look", "inventory"]


def corpus() -> list[str]:
    """Deterministic ALFWorld-flavoured training text for the tokenizer."""
    lines = [
        "You are in the middle of a room. Looking quickly around you, you see "
        + ", ".join(f"a {r} {i % 3 + 1}" for i, r in enumerate(_RECEPTACLES)) + ".",
        "Your task is to: put a clean apple in fridge.",
        "Nothing happens.",
        "You are an agent in a household. Reply with one line: Action: <command>.",
        "Think: I need to find the object first, then bring it to the target.",
        "Belief: Progress: Experience: track commit recall note",
    ]
    for i, o in enumerate(_OBJECTS):
        r = _RECEPTACLES[i % len(_RECEPTACLES)]
        n = i % 4 + 1
        lines += [
            f"Action: go to {r} {n}",
            f"Action: take {o} {n} from {r} {n}",
            f"Action: put {o} {n} in/on {r} {n}",
            f"You arrive at {r} {n}. On the {r} {n}, you see a {o} {n}.",
            f"You pick up the {o} {n} from the {r} {n}.",
            f"Your task is to: heat some {o} and put it in {r}.",
            f"Think: the {o} is probably in a {r}. {' '.join(_VERBS)}",
        ]
    lines += [str(i) for i in range(100)]
    return lines


def build_tokenizer():
    """A byte-level BPE PreTrainedTokenizerFast with the ChatML template (vocab ~1k)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def build_tiny_checkpoint(out_dir: str | os.PathLike[str], *, seed: int = 0, hidden: int = 64, layers: int = 2) -> Path:
    """Write a tiny random-init Qwen3 causal LM + tokenizer to `out_dir`; return its path."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, bos_token_id=pad)
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
    finally:
        if was:
            hf_logging.enable_progress_bar()
    tok.save_pretrained(out)
    return out
