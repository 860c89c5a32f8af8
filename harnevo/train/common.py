"""What the training stages share: resolving the harness and the games, writing an action in a harness's
reply format, and loading a base model (local dir, hub id or .gguf)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness
from harnevo.models.checkpoints import quiet_progress
from harnevo.train.config import GamesConfig


def quiet_environment() -> None:
    """The environment defaults the training stages run under (set only where the user did not)."""
    for k, v in (("TRL_EXPERIMENTAL_SILENCE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                 ("LITELLM_LOCAL_MODEL_COST_MAP", "True")):
        os.environ.setdefault(k, v)


def load_train_harness(ref: str, *, max_steps: int | None = None,
                       max_tokens: int | None = None) -> tuple[Harness, ExperienceBank | None]:
    """A harness (file, seed or RUN_DIR:best) and the bank its run learned (None for files and seeds)."""
    from harnevo.evolve.refs import is_run_ref, resolve
    from harnevo.harness.spec import load_harness

    bank = None
    if is_run_ref(ref):
        harness, bank = resolve(ref)
    else:
        harness = load_harness(ref)
    if max_steps is not None:
        harness = harness.evolve(budget={"max_steps": max_steps})
    if max_tokens is not None:
        harness = harness.evolve(model={"max_tokens": max(8, max_tokens)})
    return harness, bank


def resolve_stage_games(cfg: GamesConfig, out: Path, log=print) -> tuple[list, str]:
    """The games of a stage: `cfg.generate` new games (written once under out/games, reused on resume),
    else the split (official data under --data/$ALFWORLD_DATA, else harnevo's generated default set)."""
    from harnevo.envs.games import load_games, parse_families, resolve_games

    families = parse_families(cfg.families)
    if cfg.generate is not None:
        from harnevo.envs.generate import generate, read_manifest, split_dir

        root = out / "games"
        if read_manifest(split_dir(root, "generated")) is None:
            log(f"generating {cfg.generate} synthetic ALFWorld games (seed {cfg.seed}) into {root}")
            report = generate(root, cfg.generate, families=families, seed=cfg.seed, split="generated",
                              workers=os.cpu_count() or 1, overwrite=True)
            if report.games < cfg.generate:
                raise HarnevoError(f"only {report.games} of {cfg.generate} games could be generated")
        games = load_games("generated", families=families, n=cfg.games, seed=cfg.seed, root=root)
        return games, f"generated (synthetic) ALFWorld-format games from {root}"
    return resolve_games(cfg.split, data=cfg.data, families=families, n=cfg.games, seed=cfg.seed, log=log)


_THINK = re.compile(r"^\s*(?:think|thought)\s*:\s*(.+)$", re.I | re.M)


def wants_thought(harness: Harness) -> bool:
    """Whether the harness's reply format asks for a 'Think:' line before the action."""
    if harness.prompt is not None:
        return "think:" in harness.prompt.text.reply_format.lower()
    return "think:" in " ".join(harness.template_sources().values()).lower()


def format_reply(harness: Harness, action: str, thought: str | None = None) -> str:
    """`action` written the way the harness asks for replies ('Think: ...' then 'Action: ...', or the action
    line alone). The action line is what the session parses back to exactly `action`."""
    line = f"Action: {action}"
    if not wants_thought(harness):
        return line
    return f"Think: {thought or default_thought(action)}\n{line}"


def default_thought(action: str) -> str:
    """A short thought for a teacher that gives none: what the action does, in words."""
    head = action.split(" ")[0]
    return {"go": f"I {action} to look for what the task needs.",
            "take": f"I {action.replace('take', 'take', 1)} since the task needs it.",
            "move": f"I {action.replace('move', 'put', 1).replace(' to ', ' in/on ')} as the task asks.",
            "open": f"I {action} to see what is inside.",
            "heat": f"I {action} as the task asks.", "cool": f"I {action} as the task asks.",
            "clean": f"I {action} as the task asks.", "use": f"I {action} to see the object in its light.",
            "track": "I check what I know about the room.", "commit": "I record the subgoal I just finished.",
            "recall": "I recall lessons from earlier episodes.", "note": "I keep this lesson for later."
            }.get(head, f"I {action}.")


def thought_of(reply: str) -> str | None:
    m = _THINK.search(reply or "")
    return m.group(1).strip() if m else None


def is_gguf(base: str) -> bool:
    return base.lower().endswith(".gguf")


def load_base(base: str, *, device_map: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) of a base: a local checkpoint dir, a hub id, or a .gguf file (dequantized to
    float32 and saved once as a checkpoint, harnevo.models.gguf.cached_checkpoint). The tokenizer must carry a chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if is_gguf(base):
        p = Path(base).expanduser()
        if not p.is_file():
            raise HarnevoError(f"--base {base}: no such .gguf file")
        from harnevo.models.gguf import cached_checkpoint

        # converted once into a real checkpoint (a GGUF-loaded model refuses save_pretrained, and a LoRA
        # adapter must name a loadable base); later loads take seconds
        base = str(cached_checkpoint(p))
    p = Path(base).expanduser()
    local = p.exists()
    if local and not (p / "config.json").is_file():
        raise HarnevoError(f"--base {base}: no transformers checkpoint (config.json) in {p}")
    src = str(p.resolve()) if local else base
    try:
        tok = AutoTokenizer.from_pretrained(src, local_files_only=local or None)
        model = AutoModelForCausalLM.from_pretrained(src, local_files_only=local or None,
                                                     dtype=torch.float32 if not torch.cuda.is_available()
                                                     else "auto")
    except OSError as e:
        raise HarnevoError(f"--base {base}: cannot load it ({' '.join(str(e).split())[:200]})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise HarnevoError(f"--base {base}: its tokenizer has no chat template (harness prompts are chats); "
                           f"use an instruct/chat checkpoint or one with a template set")
    return model, tok


def peft_config(cfg: Any) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_targets(), task_type="CAUSAL_LM")


def save_checkpoint(trainer: Any, tokenizer: Any, out: Path, *, lora: bool, merge: bool) -> dict[str, str]:
    """The trained policy where `hf/<out>` loads it: the merged model (full fine-tune or LoRA merged)
    in `out`, and with LoRA the adapter alone in `out/adapter`. Returns what was written."""
    model = trainer.model
    unwrapped = trainer.accelerator.unwrap_model(model) if hasattr(trainer, "accelerator") else model
    written: dict[str, str] = {}
    with quiet_progress():
        if lora:
            unwrapped.save_pretrained(out / "adapter")
            tokenizer.save_pretrained(out / "adapter")
            written["adapter"] = str(out / "adapter")
            if merge:
                merged = unwrapped.merge_and_unload()
                merged.save_pretrained(out)
                written["model"] = str(out)
        else:
            unwrapped.save_pretrained(out)
            written["model"] = str(out)
        tokenizer.save_pretrained(out)
    return written


__all__ = ["format_reply", "is_gguf", "load_base", "load_train_harness", "peft_config", "quiet_environment",
           "resolve_stage_games", "save_checkpoint", "thought_of", "wants_thought"]
