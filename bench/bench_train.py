"""Two small students trained from scratch on CPU, one per harness, measured on official valid_unseen.

    python bench/bench_train.py --data ../shared/alfworld                       # the defaults below
    (the settings of the README's attempt 8: about 3.5 hours on a 2-core CPU)
    python bench/bench_train.py --data ../shared/alfworld --bpe-harness runs/r1:best --eval-games 134
    python bench/bench_train.py --data ../shared/alfworld --students react --layers 4 --dagger-fresh-from 1
    (--students trains one of the two; the table then holds its rows and sim/random's)

What it does (every stage through harnevo's own API; each writes under --out and a re-run resumes it):
  1. games     --games new ALFWorld games from harnevo's generator (harnevo.envs.generate; synthetic,
               written once under OUT/games and reused; --games-dir reuses another folder of them)
  2. collect   the --teacher plays them under (a) `react` and (b) --bpe-harness (default the seed
               `bpe_always_on`; `RUN_DIR:best` takes an evolution run's best), step budget --max-steps,
               --samples episodes per game, through harnevo.train.collect.run_collect (won episodes only,
               one row per turn). The default teacher is TEXT_TEACHER, a lapse-free `sim/bounded`: it acts
               only on the text of the prompt the student will see (where object types usually are, which
               receptacles the prompt shows unvisited), so what it does is learnable from that prompt.
               `--teacher expert` is ALFWorld's handcoded expert, which reads the hidden game state and walks
               straight to the object: no prompt shows why. (At this CPU scale only the text-only teacher's
               students, after DAgger and with sampling, have won held-out games: README.) With the
               expert, each turn is perturbed with chance --perturb (a random admissible 'go to'; the
               expert recovers and that turn gives no row: DART).
  3. tokenizer a byte-level BPE (--vocab) trained on the text of both datasets and the three harnesses'
               templates, with the ChatML template of harnevo.models.tiny; one random-init Qwen3-style model
               (--hidden, --layers; a fixed seed) built from it and pretrained from scratch with a language-model
               loss on every token of the collected episodes (--pretrain-steps windows of 8 x 512 tokens; SFT
               alone, whose loss covers only the reply, left a student that repeats one action): both students
               start from these same weights
  4. sft       TRL's SFTTrainer through harnevo.train.sft.run_sft (loss on the assistant reply only; rows
               are never cut: the longest row sets max_length, so train and evaluation see the same text)
  4b. dagger   with --dagger-rounds R: each student plays the generated games under its own harness, the
               teacher labels every state it reaches and its command runs with chance --dagger-executes (else
               the student's: harnevo.train.distill, supervisor_executes), then --dagger-steps more SFT steps
               from the student on all rows so far (DAgger, Ross et al. 2011)
  5. evaluate  harnevo.runtime.evaluate on official valid_unseen (--eval-games, a seeded sample; default 0:
               all 134) at --max-steps: each student under the harness it was trained with and under
               `minimal`, and `sim/random` under each of the three. Students decode greedily (the harnesses'
               temperature 0) unless --temperature T > 0: then they sample from their own distribution at T,
               seeded by the prompt (harnevo/models/hf.py: the same prompt gives the same reply in any run), in
               the DAgger rounds as at evaluation
  Stages 2, 4 and 5 run as two processes (one per student; a 2-core machine), each with one engine worker.

It prints one markdown table (success, Wilson 95% CI over games, n, tokens and steps per episode) and a
verdict line per student: whether its CI under its own harness lies wholly above sim/random's under the
same harness. Tokens per episode are the student tokenizer's (hf) or harnevo's 4-characters-a-token
estimate (sim/random): not comparable across those two kinds of row. The table is also written to
OUT/table.md and every number to OUT/results.json. Needs the `train` extra (trl, peft, datasets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

for _k, _v in (("HF_HUB_OFFLINE", "1"), ("TRL_EXPERIMENTAL_SILENCE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
               ("LITELLM_LOCAL_MODEL_COST_MAP", "True"), ("TQDM_DISABLE", "1"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_k, _v)

GEN_SPLIT = "generated"
EVAL_SPLIT = "valid_unseen"
MINIMAL = "minimal"
RANDOM = "sim/random"
# the text-only teacher: sim/bounded with no lapses, no long-prompt penalty and no forgetting
TEXT_TEACHER = "sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


# ------------------------------------------------------------------ 1. games

def ensure_games(args) -> Path:
    from harnevo.envs.generate import generate, read_manifest, split_dir

    root = Path(args.games_dir) if args.games_dir else args.out / "games"
    man = read_manifest(split_dir(root, GEN_SPLIT))
    if man is not None:
        log(f"games: reusing generated games in {root}")
        return root
    if args.games_dir:
        raise SystemExit(f"--games-dir {root}: no generated split '{GEN_SPLIT}' there")
    t0 = time.perf_counter()
    log(f"games: generating {args.games} synthetic games (seed {args.gen_seed}) into {root}")
    rep = generate(root, args.games, seed=args.gen_seed, split=GEN_SPLIT, workers=args.workers, overwrite=True)
    log(f"games: {rep.games} games in {time.perf_counter() - t0:.0f} s")
    return root


def dagger_games(args, r: int, games_root: Path) -> tuple[Path, int | None]:
    """The games DAgger round r plays: from round --dagger-fresh-from on, --dagger-fresh-games games generated
    for that round alone (generator seed 1000 x --gen-seed + r, under OUT/games_dagger{r}; none is a
    collection game); before it, the seeded sample of the collection games (the same sample every round)."""
    from harnevo.envs.generate import generate, read_manifest, split_dir

    if not args.dagger_fresh_from or r < args.dagger_fresh_from:
        return games_root, args.dagger_games
    root = args.out / f"games_dagger{r}"
    if read_manifest(split_dir(root, GEN_SPLIT)) is None:
        n, seed = args.dagger_fresh_games, 1000 * args.gen_seed + r
        t0 = time.perf_counter()
        log(f"games: generating {n} fresh games for DAgger round {r} (seed {seed}) into {root}")
        rep = generate(root, n, seed=seed, split=GEN_SPLIT, workers=args.workers, overwrite=True)
        log(f"games: {rep.games} games in {time.perf_counter() - t0:.0f} s")
    return root, None


def dagger_games_text(args) -> str:
    """The games the DAgger rounds play (dagger_games above), in words for the report."""
    fresh = f"{args.dagger_fresh_games} games generated for each round, never trained on before"
    if args.dagger_fresh_from == 1:
        return fresh
    same = (f"{args.dagger_games} of" if args.dagger_games else "all") + " the same games"
    return same + (f" (from round {args.dagger_fresh_from} on, {fresh})" if args.dagger_fresh_from else "")


# ------------------------------------------------------------------ 2. collect (one process per harness)

def collect_job(harness: str, teacher: str, games_root: str, out: str, n_games: int | None, max_steps: int,
                samples: int, perturb: float) -> dict:
    one_thread()
    from harnevo.train.collect import run_collect
    from harnevo.train.config import CollectConfig

    cfg = CollectConfig(harness=harness, teacher=teacher, split=GEN_SPLIT, data=Path(games_root),
                        games=n_games, out=Path(out), max_steps=max_steps, workers=1, concurrency=2,
                        samples=samples, perturb=perturb)
    t0 = time.perf_counter()
    summary = run_collect(cfg, log=lambda m: log(f"[{Path(out).name}] {m}"))
    summary["wall_s"] = time.perf_counter() - t0
    return summary


# ------------------------------------------------------------------ 3. tokenizer and the random-init base

def corpus(datasets: list[Path], harnesses: list[str]):
    from harnevo.harness.spec import load_harness
    from harnevo.train.collect import load_dataset_dir

    for d in datasets:
        for row in load_dataset_dir(d):
            for m in row["prompt"] + row["completion"]:
                yield m["content"]
    for h in harnesses:
        yield from load_harness(h).template_sources().values()


def build_base(args, datasets: list[Path], harnesses: list[str]) -> Path:
    """A byte-level BPE tokenizer trained on the collected text and one random-init Qwen3 model."""
    out = args.out / "base"
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        log(f"base: reusing {out}")
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from harnevo.models.tiny import CHAT_TEMPLATE, SPECIAL_TOKENS

    t0 = time.perf_counter()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(corpus(datasets, harnesses), trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  chat_template=CHAT_TEMPLATE, model_max_length=args.context)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    heads = max(2, args.hidden // 32)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=args.hidden * 3,
                         num_hidden_layers=args.layers, num_attention_heads=heads,
                         num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,  # must divide the heads
                         head_dim=args.hidden // heads,
                         max_position_embeddings=args.context, tie_word_embeddings=True,
                         bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, bos_token_id=pad)
    pre = pretrain(model, tok, datasets, args) if args.pretrain_steps else {}
    from harnevo.train.common import quiet_progress

    with quiet_progress():
        model.save_pretrained(out)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    (out / "bench_base.json").write_text(json.dumps({"parameters": n, "vocab": len(tok), "hidden": args.hidden,
                                                     "layers": args.layers, "heads": heads, "seed": args.seed,
                                                     "pretrain": pre}))
    log(f"base: BPE vocab {len(tok)}, Qwen3 hidden {args.hidden} x {args.layers} layers, {n / 1e6:.2f} M "
        f"parameters, random init (seed {args.seed}) in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def pretrain(model, tok, datasets: list[Path], args) -> dict:
    """Language-model loss on every token of the collected episodes (both datasets' chats, templated and
    concatenated), random windows of --pretrain-length tokens: the random-init model learns the game's
    text and to copy names from its context before SFT teaches it the replies. Nothing of valid_unseen
    is read here."""
    import random

    import torch

    from harnevo.train.collect import load_dataset_dir

    t0 = time.perf_counter()
    stream: list[int] = []
    for d in datasets:
        for row in load_dataset_dir(d):
            ids = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=True)
            stream.extend(ids["input_ids"] if hasattr(ids, "keys") else ids)
    data = torch.tensor(stream, dtype=torch.long)
    rng = random.Random(args.seed)
    L, B, steps = args.pretrain_length, 8, args.pretrain_steps
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1 + __import__("math").cos(__import__("math").pi * i / steps)))
    model.train()
    losses = []
    for i in range(steps):
        starts = [rng.randrange(0, len(data) - L - 1) for _ in range(B)]
        x = torch.stack([data[s:s + L] for s in starts])
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if i % max(1, steps // 10) == 0 or i == steps - 1:
            log(f"pretrain: step {i + 1}/{steps} loss {losses[-1]:.3f}")
    model.eval()
    return {"steps": steps, "batch": B, "length": L, "tokens_in_stream": len(stream), "first_loss": losses[0],
            "last_loss": sum(losses[-10:]) / len(losses[-10:]), "wall_s": time.perf_counter() - t0}


def longest_row(datasets: list[Path], base: Path) -> int:
    from transformers import AutoTokenizer

    from harnevo.train.collect import load_dataset_dir

    tok = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    most = 0
    for d in datasets:
        for row in load_dataset_dir(d):
            ids = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            most = max(most, len(ids))
    return most


# ------------------------------------------------------------------ 4. sft (one process per student)

def sft_job(data: str, base: str, out: str, steps: int, batch: int, lr: float, max_length: int, seed: int) -> dict:
    one_thread()
    from harnevo.train.config import SFTConfig
    from harnevo.train.sft import run_sft

    cfg = SFTConfig.from_profile("tiny", data=Path(data), base=base, out=Path(out), max_steps=steps,
                                 batch_size=batch, grad_accum=1, lr=lr, scheduler="cosine", warmup_ratio=0.05,
                                 max_length=max_length, logging_steps=max(1, steps // 20),
                                 save_steps=max(1, steps // 2), seed=seed)
    t0 = time.perf_counter()
    summary = run_sft(cfg, log=lambda m: log(f"[{Path(out).name}] {m}"))
    summary["wall_s"] = time.perf_counter() - t0
    return summary


# ------------------------------------------------------------------ 4b. DAgger rounds (one process per student)

def dagger_job(harness: str, teacher: str, student: str, games_root: str, out: str, max_steps: int,
               executes: float, student_harness: str, n_games: int | None) -> dict:
    """The student plays the generated games under its own harness; the teacher labels every state it reaches
    (harnevo.train.distill with supervisor_executes below 1: the student's own command runs otherwise)."""
    one_thread()
    from harnevo.train.config import DistillConfig
    from harnevo.train.distill import run_distill

    cfg = DistillConfig(harness=harness, supervisor=teacher, student=student, student_harness=student_harness,
                        split=GEN_SPLIT, data=Path(games_root), games=n_games, out=Path(out), max_steps=max_steps,
                        baseline=False,
                        keep_failed=True, supervisor_executes=executes, workers=1, concurrency=2)
    t0 = time.perf_counter()
    summary = run_distill(cfg, log=lambda m: log(f"[{Path(out).name}] {m}"))
    summary["wall_s"] = time.perf_counter() - t0
    return summary


def sampling_harness(ref: str, temperature: float, out: Path) -> str:
    """`ref` itself at temperature 0; else a harness file of it that samples at `temperature` (under out/)."""
    if temperature <= 0:
        return ref
    from harnevo.train.common import load_train_harness

    h = load_train_harness(ref)[0]
    path = out / f"harness_{h.name}_t{temperature:g}.yaml"
    if not path.is_file():
        path.write_text(h.evolve(model={"temperature": temperature}).to_yaml(), encoding="utf-8")
    return str(path)


def merge_datasets(parts: list[Path], out: Path) -> Path:
    """The union of collected and DAgger rows (prompt and completion only), written once to out/dataset."""
    from datasets import concatenate_datasets

    from harnevo.train.collect import DATASET, load_dataset_dir

    final = out / DATASET
    if final.is_dir():
        return out
    ds = concatenate_datasets([load_dataset_dir(p).select_columns(["prompt", "completion"]) for p in parts])
    tmp = out / (DATASET + ".tmp")
    ds.save_to_disk(str(tmp))
    tmp.rename(final)
    (out / "parts.json").write_text(json.dumps([str(p) for p in parts]))
    return out


# ------------------------------------------------------------------ 5. evaluate (one process per student)

def eval_job(jobs: list[tuple[str, str, str]], data: str | None, n_games: int | None, seed: int, max_steps: int,
             max_tokens: int, concurrency: int, temperature: float) -> list[dict]:
    """Each (label, harness ref, model) on official valid_unseen, one engine pool for all of them."""
    one_thread()
    return asyncio.run(_eval(jobs, data, n_games, seed, max_steps, max_tokens, concurrency, temperature))


async def _eval(jobs, data, n_games, seed, max_steps, max_tokens, concurrency, temperature) -> list[dict]:
    from harnevo.envs.games import resolve_games
    from harnevo.envs.pool import EnginePool
    from harnevo.models import get_model
    from harnevo.runtime.evaluate import evaluate
    from harnevo.train.common import load_train_harness

    games, source = resolve_games(EVAL_SPLIT, data=data, n=n_games, seed=seed, log=log)
    if not source.startswith("official"):
        raise SystemExit(f"{EVAL_SPLIT} is not official ALFWorld data here ({source}); pass --data")
    results = []
    async with EnginePool(workers=1, max_cached_games=max(32, len(games))) as pool:
        for out, ref, model_name in jobs:
            # the reply length is capped for every policy alike (students stop at their end token long before)
            harness, _ = load_train_harness(ref, max_steps=max_steps)
            if harness.model.max_tokens > max_tokens:
                harness = harness.evolve(model={"max_tokens": max_tokens})
            if temperature > 0 and model_name.startswith("hf/"):  # students sample; sim/random is random anyway
                harness = harness.evolve(model={"temperature": temperature})
            model = get_model(model_name)
            t0 = time.perf_counter()
            try:
                res = await evaluate(harness, model, games, pool, out=out, concurrency=concurrency,
                                     header={"data_source": source, "bench": "bench_train"})
            finally:
                await model.aclose()
            s = res.summary
            s["bench_wall_s"] = time.perf_counter() - t0
            log(f"eval {Path(out).name}: {s['successes']}/{s['episodes']} won "
                f"({100 * s['success_rate']:.1f}% [{100 * s['ci95'][0]:.1f}-{100 * s['ci95'][1]:.1f}]) "
                f"in {s['bench_wall_s']:.0f} s")
            results.append({"out": out, "harness_ref": ref, "model": model_name, "summary": s})
    return results


# ------------------------------------------------------------------ table

def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table(rows: list[dict], meta: dict) -> str:
    lines = [
        f"Students: Qwen3-style, {meta['parameters'] / 1e6:.2f} M parameters (hidden {meta['hidden']}, "
        f"{meta['layers']} layers, BPE vocab {meta['vocab']}), random init, trained from scratch on CPU by SFT on "
        f"the won episodes of {meta['teacher']} ({meta['collect']}); before SFT, one shared language-model pretraining on the "
        f"same collected text ({meta['pretrain_text']}). Evaluated on official ALFWorld `{EVAL_SPLIT}` "
        f"({meta['eval_games']} games{meta['eval_sample']}), step budget {meta['max_steps']}, "
        f"{'students sampling at temperature %g (seeded by the prompt)' % meta['temperature'] if meta.get('temperature') else 'greedy'}, replies "
        f"capped at {meta['max_tokens']} tokens; alfworld {meta.get('alfworld', '?')}, textworld "
        f"{meta.get('textworld', '?')}. CI: Wilson 95% over games. `sim/random` is a simulated agent (a random "
        f"admissible action, 'look' when none is shown), not a language model.",
        "",
        "| policy | trained under | evaluated under | success | 95% CI | won / n | steps/ep | invalid/ep | tokens/ep |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["summary"]
        tok = f"{s['tokens_per_episode']:.0f}" + (" (approx.)" if s.get("simulated") else "")
        lines.append(f"| {r['policy']} | {r['trained']} | {r['under']} | {pct(s['success_rate'])} | "
                     f"{pct(s['ci95'][0])}-{pct(s['ci95'][1])} | {s['successes']}/{s['episodes']} | "
                     f"{s['mean_steps']:.1f} | {s['invalid_replies_per_episode']:.1f} | {tok} |")
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> list[str]:
    by = {(r["policy"], r["under"]): r["summary"] for r in rows}
    out = []
    for r in rows:
        if r["policy"] == RANDOM or r["trained"] != r["under"]:
            continue
        rnd = by.get((RANDOM, r["under"]))
        if rnd is None:
            continue
        s = r["summary"]
        ok = s["ci95"][0] > rnd["ci95"][1]
        out.append(f"- {r['policy']} under {r['under']}: {pct(s['success_rate'])} [{pct(s['ci95'][0])}-"
                   f"{pct(s['ci95'][1])}] vs sim/random {pct(rnd['success_rate'])} [{pct(rnd['ci95'][0])}-"
                   f"{pct(rnd['ci95'][1])}]: {'beats it by more than the CIs' if ok else 'CIs overlap: NOT shown better'}")
    return out


# ------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="folder holding official json_2.1.1 (default $ALFWORLD_DATA)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_train"))
    p.add_argument("--bpe-harness", default="bpe_always_on", help="seed, harness file or RUN_DIR:best")
    p.add_argument("--students", default="react,bpe", help="which students to train: 'react', 'bpe' or both "
                   "(one student leaves the second core to its engine worker and evaluation)")
    p.add_argument("--games", type=int, default=200, help="generated games for collection")
    p.add_argument("--gen-seed", type=int, default=1)
    p.add_argument("--games-dir", default=None, help="reuse generated games from this folder")
    p.add_argument("--max-steps", type=int, default=30, help="step budget of collection and evaluation")
    p.add_argument("--max-tokens", type=int, default=64, help="reply length cap at evaluation")
    p.add_argument("--teacher", default=TEXT_TEACHER, help="'expert' or a model name (default: the text-only "
                   "lapse-free sim/bounded)")
    p.add_argument("--samples", type=int, default=2, help="teacher episodes per generated game")
    p.add_argument("--perturb", type=float, default=None,
                   help="expert only: chance per turn of a random 'go to' in collection (DART; that turn gives "
                        "no row; default 0.25)")
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--pretrain-steps", type=int, default=600, help="LM steps on all collected text (0: none)")
    p.add_argument("--pretrain-length", type=int, default=512)
    p.add_argument("--sft-steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dagger-rounds", type=int, default=8,
                   help="rounds of DAgger after SFT: the student plays the generated games, the teacher labels "
                        "each state, SFT goes on from the student on all rows so far")
    p.add_argument("--dagger-executes", type=float, default=0.5,
                   help="chance per turn that the teacher's command runs in a DAgger round (else the student's)")
    p.add_argument("--dagger-games", type=int, default=60,
                   help="a seeded sample of the generated games played in each DAgger round (0: all)")
    p.add_argument("--dagger-fresh-from", type=int, default=0,
                   help="from this DAgger round on, each round plays --dagger-fresh-games games generated for it "
                        "alone (never seen in training); 0: every round plays the same seeded sample of the "
                        "collection games")
    p.add_argument("--dagger-fresh-games", type=int, default=150, help="games generated for each such round")
    p.add_argument("--dagger-steps", type=int, default=250, help="SFT steps per DAgger round")
    p.add_argument("--temperature", type=float, default=0.7,
                   help="students sample at this temperature (seeded by the prompt) in DAgger rounds and at "
                        "evaluation; 0: greedy")
    p.add_argument("--eval-games", type=int, default=0, help="a seeded sample of valid_unseen (0: all 134)")
    p.add_argument("--eval-seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=2, help="episodes in flight per evaluation")
    p.add_argument("--workers", type=int, default=2, help="processes for game generation")
    p.add_argument("--seed", type=int, default=0, help="seed of the model init and of SFT")
    args = p.parse_args(argv)
    args.eval_games = args.eval_games or None
    args.dagger_games = args.dagger_games or None
    if args.perturb is None:
        args.perturb = 0.25 if args.teacher == "expert" else 0.0
    elif args.perturb and args.teacher != "expert":
        p.error("--perturb applies to --teacher expert only")
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    walls: dict[str, float] = {}
    ctx = get_context("spawn")

    from harnevo.envs.alfworld import engine_versions
    from harnevo.train.common import load_train_harness

    bpe_ref = args.bpe_harness
    bpe_name = load_train_harness(bpe_ref)[0].name
    wanted = [w.strip() for w in args.students.split(",") if w.strip()]
    if not wanted or set(wanted) - {"react", "bpe"}:
        p.error(f"--students {args.students!r}: give 'react', 'bpe' or 'react,bpe'")
    students = {name: ref for key, name, ref in (("react", "react", "react"), ("bpe", bpe_name, bpe_ref))
                if key in wanted}

    t = time.perf_counter()
    games_root = ensure_games(args)
    walls["games"] = time.perf_counter() - t

    t = time.perf_counter()
    dirs = {name: args.out / f"collect_{name}" for name in students}
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        futs = {name: ex.submit(collect_job, ref, args.teacher, str(games_root), str(dirs[name]), None, args.max_steps,
                                   args.samples, args.perturb)
                for name, ref in students.items()}
        collected = {name: f.result() for name, f in futs.items()}
    walls["collect"] = time.perf_counter() - t

    t = time.perf_counter()
    base = build_base(args, list(dirs.values()), ["react", bpe_ref, MINIMAL])
    max_len = longest_row(list(dirs.values()), base) + 8
    meta = {**json.loads((base / "bench_base.json").read_text()), "max_length": max_len}
    log(f"sft: longest row {max_len - 8} tokens; max_length {max_len} (no row is cut or dropped)")
    walls["tokenizer_base"] = time.perf_counter() - t

    t = time.perf_counter()
    ckpt = {name: args.out / f"student_{name}" for name in students}
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        futs = {name: ex.submit(sft_job, str(dirs[name]), str(base), str(ckpt[name]), args.sft_steps,
                                args.batch_size, args.lr, max_len, args.seed) for name in students}
        trained = {name: f.result() for name, f in futs.items()}
    walls["sft"] = time.perf_counter() - t

    dagger: dict[str, list[dict]] = {name: [] for name in students}
    parts = {name: [dirs[name]] for name in students}
    for r in range(1, args.dagger_rounds + 1):
        t = time.perf_counter()
        ddirs = {name: args.out / f"dagger{r}_{name}" for name in students}
        round_games, round_sample = dagger_games(args, r, games_root)
        with ProcessPoolExecutor(2, mp_context=ctx) as ex:
            futs = {name: ex.submit(dagger_job, ref, args.teacher, f"hf/{ckpt[name]}", str(round_games),
                                    str(ddirs[name]), args.max_steps, args.dagger_executes,
                                    sampling_harness(ref, args.temperature, args.out), round_sample)
                    for name, ref in students.items()}
            for name, f in futs.items():
                dagger[name].append(f.result())
        for name in students:
            parts[name].append(ddirs[name])
            merge_datasets(parts[name], args.out / f"mix{r}_{name}")
        nxt = {name: args.out / f"student_{name}_dagger{r}" for name in students}
        max_len = max(max_len, longest_row(list(ddirs.values()), base) + 8)
        with ProcessPoolExecutor(2, mp_context=ctx) as ex:
            futs = {name: ex.submit(sft_job, str(args.out / f"mix{r}_{name}"), str(ckpt[name]), str(nxt[name]),
                                    args.dagger_steps, args.batch_size, args.lr / 3, max_len, args.seed + r)
                    for name in students}
            for name, f in futs.items():
                trained[name] = {**f.result(), "first_sft": trained[name]} if r == 1 else \
                    {**f.result(), "first_sft": trained[name]["first_sft"]}
        ckpt = nxt
        walls[f"dagger{r}"] = time.perf_counter() - t

    t = time.perf_counter()
    ev = args.out / "eval"
    label = {}
    own, rest = [], []  # each student under its own harness; the other rows
    for name, ref in students.items():
        model = f"hf/{ckpt[name]}"
        mine = [(str(ev / f"{name}__under_{name}"), ref, model), (str(ev / f"{name}__under_{MINIMAL}"), MINIMAL, model),
                (str(ev / f"random__under_{name}"), ref, RANDOM)]
        label.update({mine[0][0]: (f"student ({name})", name, name), mine[1][0]: (f"student ({name})", name, MINIMAL),
                      mine[2][0]: (RANDOM, "-", name)})
        own.append(mine[0])
        rest += mine[1:]
    rest.append((str(ev / f"random__under_{MINIMAL}"), MINIMAL, RANDOM))
    label[rest[-1][0]] = (RANDOM, "-", MINIMAL)
    # two processes: each student's own-harness row leads one of them; the rest is dealt out in turn
    plans = [[], []]
    for j in own + rest:
        min(plans, key=len).append(j)
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        futs = [ex.submit(eval_job, jobs, args.data, args.eval_games, args.eval_seed, args.max_steps, args.max_tokens,
                          args.concurrency, args.temperature) for jobs in plans]
        evaluated = [r for f in futs for r in f.result()]
    walls["eval"] = time.perf_counter() - t
    walls["total"] = time.perf_counter() - t_start

    order = ["student (react)", f"student ({bpe_name})", RANDOM]
    rows = []
    for r in evaluated:
        policy, trained_under, under = label[r["out"]]
        rows.append({**r, "policy": policy, "trained": trained_under, "under": under})
    rows.sort(key=lambda r: (order.index(r["policy"]), ["react", bpe_name, MINIMAL].index(r["under"])))
    c = collected
    meta.update({
        "teacher": ("ALFWorld's handcoded expert (it reads the hidden game state)" if args.teacher == "expert" else
                    f"the simulated text-only teacher `{args.teacher}` (it acts only on the prompt's text)"
                    if args.teacher.startswith("sim/") else f"the teacher `{args.teacher}`"),
        "collect": ", ".join(f"{n}: {c[n]['rows']} rows from {c[n]['wins']}/{c[n]['episodes']} won episodes"
                             for n in students) + f" of {next(iter(c.values()))['games']} generated (synthetic) games x "
                             f"{args.samples} samples" + (f", perturbation {args.perturb} (random 'go to' turns, no row)"
                                                         if args.perturb else "") + ", "
                             f"{args.sft_steps} steps x batch {args.batch_size}"
                             + (f"; then {args.dagger_rounds} DAgger round(s): the student plays "
                                + dagger_games_text(args) + ", the teacher labels every state it reaches (its command runs with "
                                f"chance {args.dagger_executes}), {args.dagger_steps} more SFT steps on all rows"
                                if args.dagger_rounds else ""),
        "pretrain_text": (f"{meta['pretrain']['steps']} steps x 8 x {meta['pretrain']['length']} tokens, loss "
                          f"{meta['pretrain']['first_loss']:.2f} -> {meta['pretrain']['last_loss']:.2f}")
        if meta.get("pretrain") else "none",
        "eval_games": rows[0]["summary"]["games"],
        "eval_sample": f", seeded sample (seed {args.eval_seed})" if args.eval_games else "",
        "max_steps": args.max_steps, "max_tokens": args.max_tokens, "temperature": args.temperature,
        **engine_versions(),
    })
    text = table(rows, meta)
    verdict = verdicts(rows)
    def sft_of(d: dict) -> str:
        return f"loss {d['first_loss']:.3f} -> {d['last_loss']:.3f} ({d['steps']} steps, {d['rows']} rows)"

    sft_line = "; ".join(f"{n}: {sft_of(trained[n].get('first_sft', trained[n]))}" for n in students)
    dagger_lines = [
        f"DAgger round {i + 1}, {n}: the student played {d['games']} generated games"
        f"{' (fresh)' if args.dagger_fresh_from and i + 1 >= args.dagger_fresh_from else ''} under its harness, the "
        f"teacher's command ran with chance {args.dagger_executes}, else the student's; the teacher disagreed with "
        f"{100 * d['intervention_rate']:.0f}% of the student's commands; {100 * d['success_with_supervisor']:.0f}% "
        f"won; {d['rows']} labelled rows, then {args.dagger_steps} SFT steps from the student on all rows so far"
        for n in students for i, d in enumerate(dagger[n])]
    if args.dagger_rounds:
        dagger_lines.append("After DAgger: " + "; ".join(f"{n}: {sft_of(trained[n])}" for n in students))
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in walls.items())
    report = "\n".join([text, "", *verdict, "", f"SFT: {sft_line}", *dagger_lines, f"Wall time: {timing}",
                        f"Command: python bench/bench_train.py {' '.join(argv if argv is not None else sys.argv[1:])}"])
    print("\n" + report, flush=True)
    (args.out / "table.md").write_text(report + "\n", encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "walls": walls, "collect": collected,
                                                       "sft": trained, "dagger": dagger, "rows": rows}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
