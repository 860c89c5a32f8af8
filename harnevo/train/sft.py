"""`harnevo train sft`: TRL's SFTTrainer on a collected chat dataset, loss on the assistant reply only.

The dataset is in TRL's conversational prompt-completion form (`prompt`: the harness's messages,
`completion`: the assistant reply), so the loss covers the completion tokens only
(`completion_only_loss`), with any chat template. Rows longer than `max_length` tokens are dropped, not
cut (cutting keeps the start and would drop the very reply the row teaches); how many is logged.

`--base` is a local checkpoint, a hub id (where the hub is reachable) or a `.gguf` file (dequantized to
float32 by `harnevo.models.gguf.load_gguf`). With `lora` a peft LoRA adapter is trained; the output is
the merged model (what `hf/<out>` loads) and the adapter alone in `out/adapter`.

Output folder: the model and tokenizer, `loss.jsonl` (TRL's log: loss, learning rate, per logging
step), `checkpoints/` (the resume points; re-running the same command continues from the last),
`manifest.json` (the inputs: dataset and its manifest digest, base, every setting; first and last loss).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.train.collect import load_dataset_dir
from harnevo.train.common import load_base, peft_config, quiet_environment, quiet_progress, save_checkpoint
from harnevo.train.config import SFTConfig
from harnevo.train.manifest import digest, finished_before, write_manifest

LOSS_LOG = "loss.jsonl"


def use_bf16(flag: bool | None) -> bool:
    import torch

    if flag is not None:
        if flag and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            raise HarnevoError("bf16 needs a GPU that supports it; drop --bf16 on this machine")
        return flag
    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def checkpointing(on: bool) -> dict[str, bool]:
    """Gradient checkpointing, passed only when on (transformers 5.25 renamed the flag; both accept it)."""
    return {"gradient_checkpointing": True} if on else {}


def pin_memory() -> bool:
    import torch

    return torch.cuda.is_available()


def last_checkpoint(folder: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def fit_rows(ds, tokenizer, max_length: int) -> tuple[Any, int]:
    """The rows whose prompt + reply fit `max_length` tokens, and how many were dropped."""
    def n_tokens(row: dict[str, Any]) -> dict[str, int]:
        ids = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return {"_n": len(ids)}

    with_len = ds.map(n_tokens)
    kept = with_len.filter(lambda r: r["_n"] <= max_length).remove_columns("_n")
    return kept, len(ds) - len(kept)


def inputs_of(cfg: SFTConfig) -> dict[str, Any]:
    settings = cfg.model_dump(mode="json", exclude={"out", "data", "base"})
    return {"data": str(Path(cfg.data).resolve()), "data_manifest": digest(Path(cfg.data)), "base": cfg.base,
            "settings": settings}


def run_sft(cfg: SFTConfig, log=print) -> dict[str, Any]:
    quiet_environment()
    out = Path(cfg.out)
    inputs = inputs_of(cfg)
    prior = finished_before(out, "sft", inputs, log)
    if prior is not None:
        return prior
    ds = load_dataset_dir(Path(cfg.data)).select_columns(["prompt", "completion"])
    with quiet_progress():
        model, tok = load_base(cfg.base)
    ds, dropped = fit_rows(ds, tok, cfg.max_length)
    if len(ds) == 0:
        raise HarnevoError(f"sft: every row is longer than max_length={cfg.max_length} tokens; raise --max-length")
    if dropped:
        log(f"sft: dropped {dropped} row(s) longer than {cfg.max_length} tokens")
    write_manifest(out, "sft", inputs=inputs, complete=False, rows=len(ds), rows_dropped=dropped)
    trainer = build_trainer(cfg, model, tok, ds)
    resume = last_checkpoint(out / "checkpoints")
    if resume:
        log(f"sft: resuming from {resume}")
    trainer.train(resume_from_checkpoint=resume)
    history = [h for h in trainer.state.log_history if "loss" in h]
    _write_log(out / LOSS_LOG, history)
    written = save_checkpoint(trainer, tok, out, lora=cfg.lora, merge=cfg.merge)
    losses = [float(h["loss"]) for h in history]
    summary = {"rows": len(ds), "rows_dropped": dropped, "steps": trainer.state.global_step,
               "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
               "written": written, "lora": cfg.lora, "base_is_gguf": cfg.base.lower().endswith(".gguf")}
    write_manifest(out, "sft", inputs=inputs, complete=True, **summary)
    if losses:
        log(f"sft: {summary['steps']} steps on {len(ds)} rows, loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
            f"model in {out}")
    return summary


def build_trainer(cfg: SFTConfig, model, tok, ds):
    import trl

    args = trl.SFTConfig(
        output_dir=str(Path(cfg.out) / "checkpoints"),
        learning_rate=cfg.lr, lr_scheduler_type=cfg.scheduler, warmup_steps=cfg.warmup_ratio,
        num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        max_length=cfg.max_length, completion_only_loss=True, packing=False,
        logging_steps=cfg.logging_steps, save_steps=cfg.save_steps, save_total_limit=2, save_strategy="steps",
        **checkpointing(cfg.gradient_checkpointing), bf16=use_bf16(cfg.bf16),
        report_to="none", disable_tqdm=True, seed=cfg.seed, data_seed=cfg.seed, dataloader_num_workers=0,
        dataset_num_proc=None, dataloader_pin_memory=pin_memory(),
    )
    return trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                          peft_config=peft_config(cfg) if cfg.lora else None)


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(h) + "\n" for h in history), encoding="utf-8")


__all__ = ["run_sft", "use_bf16"]
