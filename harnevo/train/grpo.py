"""`harnevo train grpo`: cost-aware GRPO with multi-turn rollouts in the real ALFWorld engine under a harness.

TRL's `GRPOTrainer` drives the updates; harnevo gives it a `rollout_func` (TRL 1.16, experimental) that
plays whole episodes:

  * the training dataset has one row per game (`prompt` = "game <index>: <name>"); TRL's sampler repeats
    each row G = `num_generations` times, so a batch holds G rollouts of each game. Every rollout is a
    fresh fork of the game's reset engine, so the G rollouts start from the same state;
  * each rollout is an `EpisodeSession` under the harness (the same render / parse / guard / workspace as
    `apply`); each turn the current policy (the trainer's model) samples a reply to the session's
    messages, rendered with the tokenizer's chat template;
  * the rollout returns `prompt_ids` = the first turn's prompt, `completion_ids` = the episode's turns
    in order: reply 1, the prompt of turn 2, reply 2, ... with `env_mask` 1 on the policy's reply tokens
    and 0 on the harness's prompts, so the loss falls on what the policy wrote only. (Each reply is
    scored after the earlier turns, whereas `apply` shows the policy only its turn's prompt, whose history
    window carries the earlier steps; this is the usual multi-turn GRPO approximation.) The sequence is
    cut at `max_completion_length` tokens; the episode is played to its end either way;
  * the episode's columns (`success`, `steps`, `max_steps`, `meta_actions`, `invalid_replies`) go to the
    reward functions: the cost-aware reward (`harnevo.train.rewards`), and zero-weight reporters of
    success, steps, meta-actions and invalid replies, so TRL logs their means at every update
    (`rewards/<name>/mean`).

Output folder: the policy (merged; with LoRA also `adapter/`), `updates.jsonl` (per update: reward,
success, steps, meta-actions, invalid replies, loss), `rollouts.jsonl` (every episode played),
`checkpoints/` (resume points), `manifest.json`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.train.common import (load_base, load_train_harness, peft_config, quiet_environment, quiet_progress,
                                  resolve_stage_games, save_checkpoint)
from harnevo.train.config import GRPOConfig
from harnevo.train.manifest import digest, finished_before, write_manifest
from harnevo.train.rewards import cost_aware_reward, episode_reward, episode_stat

UPDATES = "updates.jsonl"
ROLLOUTS = "rollouts.jsonl"
STATS = ("success", "steps", "meta_actions", "invalid_replies")


class EngineThread:
    """An asyncio event loop in a daemon thread holding one `EnginePool`, for synchronous callers (TRL)."""

    def __init__(self, **pool_kw: Any):
        from harnevo.envs.pool import EnginePool

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="harnevo-engine", daemon=True)
        self.thread.start()
        self.pool = EnginePool(**pool_kw)
        self.run(self.pool.__aenter__())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        try:
            self.run(self.pool.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


class EpisodeRollout:
    """TRL's `rollout_func(prompts, trainer) -> dict`: one whole episode per prompt received."""

    def __init__(self, harness, games, engine: EngineThread, tokenizer, *, temperature: float,
                 max_completion_length: int, weights, log_path: Path | None = None):
        from harnevo.runtime.session import HarnessProgram

        self.harness, self.games, self.engine, self.tok = harness, games, engine, tokenizer
        self.program = HarnessProgram(harness)
        self.temperature, self.max_len, self.weights = temperature, max_completion_length, weights
        self.log_path = log_path
        self.calls = 0

    def game_of(self, prompt: Any) -> Any:
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        try:
            return self.games[int(text.split(":")[0].removeprefix("game ").strip())]
        except (ValueError, IndexError):
            raise HarnevoError(f"grpo: a prompt that names no game of this run: {text[:60]!r}") from None

    def encode(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def generate(self, model, ids: list[int]) -> list[int]:
        import torch

        eos = self.tok.eos_token_id
        inp = torch.tensor([ids], device=model.device)
        with torch.no_grad():
            out = model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), do_sample=True,
                                 temperature=self.temperature, top_p=1.0, top_k=0,
                                 max_new_tokens=self.harness.model.max_tokens, pad_token_id=self.tok.pad_token_id,
                                 eos_token_id=eos)
        return out[0, len(ids):].tolist()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from harnevo.models.base import Reply, Usage
        from harnevo.runtime.session import EpisodeSession

        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        self.calls += 1
        games = [self.game_of(p) for p in prompts]
        sessions = [EpisodeSession(self.program, self.engine.pool, model_name="grpo-policy", sample=k)
                    for k in range(len(prompts))]

        async def reset_all():
            return await asyncio.gather(*(s.reset(g) for s, g in zip(sessions, games)))

        async def step_all(pairs):
            return await asyncio.gather(*(sessions[i].step(r) for i, r in pairs))

        current = list(self.engine.run(reset_all()))
        prompt_ids: list[list[int]] = [[] for _ in prompts]
        completion_ids: list[list[int]] = [[] for _ in prompts]
        env_mask: list[list[int]] = [[] for _ in prompts]
        try:
            while any(p is not None for p in current):
                pairs = []
                for i, p in enumerate(current):
                    if p is None:
                        continue
                    ids = self.encode(p.messages)
                    if not prompt_ids[i]:
                        prompt_ids[i] = ids
                    else:
                        self._extend(i, completion_ids, env_mask, ids, 0)
                    reply_ids = self.generate(model, ids)
                    self._extend(i, completion_ids, env_mask, reply_ids, 1)
                    text = self.tok.decode(reply_ids, skip_special_tokens=True)
                    finish = "length" if len(reply_ids) >= self.harness.model.max_tokens else "stop"
                    pairs.append((i, Reply(text=text, usage=Usage(len(ids), len(reply_ids)), finish_reason=finish,
                                           token_ids=reply_ids)))
                results = self.engine.run(step_all(pairs))
                for (i, _), nxt in zip(pairs, results):
                    current[i] = nxt
        finally:
            async def close_all():
                await asyncio.gather(*(s.close() for s in sessions))

            self.engine.run(close_all())
            if was_training:
                model.train()
        trajs = [s.trajectory for s in sessions]
        for i, t in enumerate(trajs):
            if not prompt_ids[i]:  # ended before its first prompt (engine error): an empty, unscored rollout
                prompt_ids[i] = [self.tok.eos_token_id]
            if not completion_ids[i]:
                completion_ids[i], env_mask[i] = [self.tok.eos_token_id], [0]
        max_steps = self.harness.budget.max_steps
        out = {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask,
               "success": [int(t.success) for t in trajs], "steps": [t.steps for t in trajs],
               "max_steps": [max_steps] * len(trajs), "meta_actions": [t.meta_actions for t in trajs],
               "invalid_replies": [t.invalid_replies for t in trajs]}
        self._log(trajs, trainer)
        return out

    def _extend(self, i: int, completion_ids, env_mask, ids: list[int], mask: int) -> None:
        room = self.max_len - len(completion_ids[i])
        if room > 0:
            completion_ids[i].extend(ids[:room])
            env_mask[i].extend([mask] * min(room, len(ids)))

    def _log(self, trajs, trainer) -> None:
        if self.log_path is None:
            return
        step = int(getattr(trainer.state, "global_step", 0))
        with open(self.log_path, "a", encoding="utf-8") as f:
            for t in trajs:
                f.write(json.dumps({
                    "update": step, "game": t.game, "status": t.status, "success": t.success, "reason": t.reason,
                    "steps": t.steps, "meta_actions": t.meta_actions, "invalid_replies": t.invalid_replies,
                    "reward": episode_reward(success=t.success, steps=t.steps, max_steps=self.harness.budget.max_steps,
                                             meta_actions=t.meta_actions, invalid_replies=t.invalid_replies,
                                             weights=self.weights)}) + "\n")


def inputs_of(cfg: GRPOConfig, harness, games) -> dict[str, Any]:
    init = Path(cfg.init)
    settings = cfg.model_dump(mode="json", exclude={"out", "init", "harness", "workers"})
    return {"init": cfg.init, "init_manifest": digest(init) if init.is_dir() else "", "harness": cfg.harness,
            "harness_id": harness.id, "games": [g.name for g in games], "split": games[0].split, "settings": settings}


def run_grpo(cfg: GRPOConfig, log=print) -> dict[str, Any]:
    from datasets import Dataset

    from harnevo.train.sft import last_checkpoint, use_bf16

    quiet_environment()
    out = Path(cfg.out)
    harness, _bank = load_train_harness(cfg.harness, max_steps=cfg.max_steps_episode, max_tokens=cfg.max_tokens)
    if harness.memory.experience:
        log("grpo: the harness keeps an Experience bank; rollouts start from an empty bank and do not write it")
    out.mkdir(parents=True, exist_ok=True)
    games, source = resolve_stage_games(cfg, out, log=log)
    inputs = inputs_of(cfg, harness, games)
    prior = finished_before(out, "grpo", inputs, log)
    if prior is not None:
        return prior
    write_manifest(out, "grpo", inputs=inputs, data_source=source, complete=False)
    with quiet_progress():
        model, tok = load_base(cfg.init)
    ds = Dataset.from_list([{"prompt": f"game {i}: {g.name}"} for i, g in enumerate(games)])
    engine = EngineThread(workers=cfg.workers, step_cache="default")
    try:
        rollout = EpisodeRollout(harness, games, engine, tok, temperature=cfg.temperature,
                                 max_completion_length=cfg.max_completion_length, weights=cfg.rewards,
                                 log_path=out / ROLLOUTS)
        trainer = build_trainer(cfg, model, tok, ds, rollout, bf16=use_bf16(cfg.bf16))
        resume = last_checkpoint(out / "checkpoints")
        if resume:
            log(f"grpo: resuming from {resume}")
        trainer.train(resume_from_checkpoint=resume)
    finally:
        engine.close()
    updates = update_log(trainer.state.log_history)
    (out / UPDATES).write_text("".join(json.dumps(u) + "\n" for u in updates), encoding="utf-8")
    written = save_checkpoint(trainer, tok, out, lora=cfg.lora, merge=cfg.merge)
    summary = {"updates": trainer.state.global_step, "games": len(games), "num_generations": cfg.num_generations,
               "max_steps_episode": harness.budget.max_steps, "written": written,
               "first": updates[0] if updates else None, "last": updates[-1] if updates else None}
    write_manifest(out, "grpo", inputs=inputs, data_source=source, complete=True, **summary)
    for u in updates:
        log(f"grpo: update {u['step']}: reward {u.get('reward', float('nan')):.3f}  success {u.get('success', 0):.2f}  "
            f"steps {u.get('steps', 0):.1f}  meta-actions {u.get('meta_actions', 0):.2f}  "
            f"invalid {u.get('invalid_replies', 0):.2f}")
    return summary


def update_log(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per update: reward (the cost-aware one), success rate, steps, meta-actions and invalid replies per
    episode, loss: from TRL's log history."""
    rows = []
    for h in history:
        if "rewards/cost_aware/mean" not in h:
            continue
        row = {"step": h.get("step"), "reward": h["rewards/cost_aware/mean"], "reward_std": h.get("reward_std"),
               "loss": h.get("loss")}
        for k in STATS:
            row[k] = h.get(f"rewards/{k}/mean")
        rows.append(row)
    return rows


def build_trainer(cfg: GRPOConfig, model, tok, ds, rollout, *, bf16: bool):
    import trl

    from harnevo.train.sft import checkpointing, pin_memory

    batch = cfg.batch_size or cfg.games_per_update * cfg.num_generations
    if batch % cfg.num_generations:
        raise HarnevoError(f"grpo: batch_size {batch} is not a multiple of num_generations {cfg.num_generations}")
    funcs = [cost_aware_reward(cfg.rewards)] + [episode_stat(k) for k in STATS]
    args = trl.GRPOConfig(
        output_dir=str(Path(cfg.out) / "checkpoints"), learning_rate=cfg.lr, lr_scheduler_type=cfg.scheduler,
        warmup_steps=cfg.warmup_ratio, max_steps=cfg.max_steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=cfg.grad_accum, num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length, temperature=cfg.temperature, beta=cfg.beta,
        epsilon=cfg.epsilon, reward_weights=[1.0] + [0.0] * len(STATS), logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps, save_total_limit=2, **checkpointing(cfg.gradient_checkpointing), bf16=bf16,
        report_to="none", disable_tqdm=True, seed=cfg.seed, data_seed=cfg.seed, dataloader_num_workers=0,
        log_completions=False, dataloader_pin_memory=pin_memory(),
    )
    return trl.GRPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, reward_funcs=funcs,
                           rollout_func=rollout, peft_config=peft_config(cfg) if cfg.lora else None)


__all__ = ["EngineThread", "EpisodeRollout", "run_grpo", "update_log"]
