"""`harnevo train collect`: teacher episodes under a harness -> a chat dataset for SFT.

The teacher plays every (game, sample) through the step-wise `EpisodeSession`, exactly as `apply` would
play the policy, so each row holds exactly the messages the policy receives at evaluation. Teachers:

  expert      ALFWorld's handcoded expert: the engine pool runs it (`EnginePool(expert="handcoded")`) and
              every Observation carries its next action (`expert_plan`); the teacher writes that action in
              the harness's reply format ('Think: <a short gloss>' + 'Action: <command>', or the action
              line alone when the format asks for nothing else).
  any model   a --model string (openai/..., hf/<dir>, sim/...), asked like `apply` asks a policy.

Meta-actions (the expert's rule, `inline` harnesses only; other modes have none): `recall <task>` on
the first turn when the harness keeps Experience, and `commit <action>` right after every action that
changed the world (take, move, heat, cool, clean, use, answered by anything but "Nothing happens.") when
it keeps Progress. Nothing else: the expert never spends steps on `track` or `note`.

Perturbation (`perturb`, expert only, default 0): with this probability per turn the expert's action is
replaced by a random admissible `go to ...` (from a `random.Random` seeded by game and sample, so a re-run
plays the same episode); the expert plans again from wherever that led, and the perturbed turn gives no row.
The data then shows the expert recovering from places its own plan would not have visited, which a student
that errs needs (DART, Laskey et al. 2017); with `samples` > 1 each sample is perturbed differently.

Rows (one per turn of a kept episode): `prompt` (the messages the policy received), `completion` (one
assistant message: the reply in the harness's format with the action the engine *executed*, or the
meta-action; never a reply the guard rewrote, and no row for an invalid or rejected reply), and `game`,
`sample`, `turn`, `harness_id`, `teacher`. Kept: won episodes (all with `keep_failed`).

Output folder: `episodes.jsonl` (one record per finished episode, appended and fsynced as it ends),
`dataset/` (`datasets.Dataset.save_to_disk`), `manifest.json`. Re-running the same command continues
where it stopped; episodes that hit an infrastructure error are played again.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.train.common import format_reply, load_train_harness, resolve_stage_games, thought_of
from harnevo.train.config import CollectConfig
from harnevo.train.manifest import finished_before, write_manifest

EPISODES = "episodes.jsonl"
DATASET = "dataset"
_CHANGES_WORLD = ("take", "move", "heat", "cool", "clean", "use", "put", "slice", "toggle")


class ExpertTeacher:
    """Acts on the engine's Observation (the handcoded expert's plan), never on the messages; with
    `perturb` > 0 some turns take a random admissible `go to` instead (module docstring)."""

    def __init__(self, harness, perturb: float = 0.0, seed: str = ""):
        import random

        self.harness = harness
        self.inline = harness.mode == "inline"
        self.name = "expert"
        self.perturb, self.rng = perturb, random.Random(seed)
        self.perturbed: set[int] = set()  # turn indices whose action was not the expert's

    def reply(self, prompt, session) -> str:
        h, traj = self.harness, session.trajectory
        if self.inline:
            meta = self._meta(prompt, traj)
            if meta:
                return format_reply(h, meta)
        plan = list(getattr(prompt.observation, "expert_plan", None) or [])
        action = plan[0] if plan else "look"
        if self.perturb > 0 and self.rng.random() < self.perturb:
            moves = sorted(a for a in getattr(prompt.observation, "admissible", None) or []
                           if a.startswith("go to ") and a != action)
            if moves:
                self.perturbed.add(len(traj.turns))
                return format_reply(h, self.rng.choice(moves))
        return format_reply(h, action)

    def _meta(self, prompt, traj) -> str | None:
        mem = self.harness.memory
        if not traj.turns and mem.experience:
            return f"recall {traj.task.rstrip('.')}"
        if mem.progress and traj.turns:
            last = traj.turns[-1]
            if last.executed and last.executed.split(" ")[0] in _CHANGES_WORLD \
                    and "nothing happens" not in (last.observation or "").lower():
                return f"commit {last.executed}"
        return None


def rows_of(traj, harness, teacher: str, skip: set[int] = frozenset()) -> list[dict[str, Any]]:
    """The SFT rows of one trajectory: one per turn that executed an action or a meta-action, except the
    turns in `skip` (perturbed ones: not the teacher's choice)."""
    rows = []
    for i, t in enumerate(traj.turns):
        if i in skip:
            continue
        if t.executed:
            action = t.executed
        elif t.meta:
            action = t.meta
        else:
            continue  # an invalid reply or a command the guard rejected: nothing to imitate
        target = format_reply(harness, action, thought_of(t.reply))
        rows.append({"prompt": [dict(m) for m in t.messages], "completion": [{"role": "assistant", "content": target}],
                     "game": traj.game, "sample": traj.sample, "turn": i, "harness_id": harness.id,
                     "teacher": teacher})
    return rows


def approx_row_tokens(row: dict[str, Any]) -> int:
    from harnevo.models.base import approx_tokens

    return sum(approx_tokens(m["content"]) for m in row["prompt"] + row["completion"])


class EpisodeLog:
    """episodes.jsonl: one JSON record per finished episode, appended, flushed and fsynced."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        done: dict[str, dict[str, Any]] = {}
        if not self.path.is_file():
            return done
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that episode is played again
            done[rec["key"]] = rec
        return done

    def append(self, rec: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())


def run_collect(cfg: CollectConfig, log=print) -> dict[str, Any]:
    from harnevo.train.common import quiet_environment

    quiet_environment()
    harness, bank = load_train_harness(cfg.harness, max_steps=cfg.max_steps)
    cfg.out.mkdir(parents=True, exist_ok=True)
    games, source = resolve_stage_games(cfg, cfg.out, log=log)
    inputs = {"harness_id": harness.id, "harness": cfg.harness, "teacher": cfg.teacher, "samples": cfg.samples,
              "games": [g.name for g in games], "split": games[0].split, "keep_failed": cfg.keep_failed,
              **({"perturb": cfg.perturb} if cfg.perturb else {})}
    prior = finished_before(cfg.out, "collect", inputs, log)
    if prior is not None:
        return prior
    write_manifest(cfg.out, "collect", inputs=inputs, data_source=source, complete=False)
    (cfg.out / "harness.yaml").write_text(harness.to_yaml(), encoding="utf-8")
    episodes = EpisodeLog(cfg.out / EPISODES)
    done = {k: r for k, r in episodes.load().items() if r["status"] == "ok"}
    todo = [(g, s) for g in games for s in range(cfg.samples) if _key(g, s) not in done]
    if todo:
        log(f"collect: {len(todo)} episode(s) to play with teacher {cfg.teacher} under {harness.name} "
            f"({len(done)} already done)")
        asyncio.run(_play(cfg, harness, bank, todo, episodes))
    return finish_dataset(cfg, harness, games, source, inputs, episodes, log=log)


def _key(game, sample: int) -> str:
    return f"{game.split}/{game.name}#{sample}"


async def _play(cfg: CollectConfig, harness, bank, todo, episodes: EpisodeLog) -> None:
    from harnevo.envs.pool import EnginePool
    from harnevo.harness.experience import ExperienceBank
    from harnevo.runtime.episode import model_policy, play
    from harnevo.runtime.session import EpisodeSession, HarnessProgram

    program = HarnessProgram(harness)
    expert = cfg.teacher == "expert"
    model = None
    if not expert:
        from harnevo.models import get_model

        model = get_model(cfg.teacher, api_base=cfg.api_base)
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(game, sample, pool) -> None:
        async with sem:
            snapshot = None
            if harness.memory.experience:  # read-only: the run's bank (or an empty one), never written here
                snapshot = (bank or ExperienceBank(None, size=harness.memory.experience_bank_size)).snapshot()
            session = EpisodeSession(program, pool, model_name=cfg.teacher,
                                     simulated=bool(model is not None and model.simulated), sample=sample,
                                     bank=snapshot)
            teacher = ExpertTeacher(harness, cfg.perturb, seed=f"{cfg.seed}/{_key(game, sample)}") if expert else None
            if teacher is not None:
                async def policy(prompt, teacher=teacher, session=session):
                    return teacher.reply(prompt, session)
            else:
                policy = model_policy(model, session, sample)
            traj = await play(session, game, policy)
            keep = traj.ok and (traj.success or cfg.keep_failed)
            episodes.append({"key": _key(game, sample), "game": game.name, "sample": sample, "status": traj.status,
                             "success": traj.success, "reason": traj.reason, "steps": traj.steps,
                             "meta_actions": traj.meta_actions,
                             "perturbed": len(teacher.perturbed) if teacher is not None else 0,
                             "rows": rows_of(traj, harness, cfg.teacher,
                                             teacher.perturbed if teacher is not None else frozenset())
                             if keep else []})

    try:
        async with EnginePool(workers=cfg.workers, expert="handcoded" if expert else None,
                              step_cache=None if expert else "default") as pool:
            await asyncio.gather(*(one(g, s, pool) for g, s in todo))
    finally:
        if model is not None:
            await model.aclose()


def finish_dataset(cfg, harness, games, source, inputs, episodes: EpisodeLog, log=print) -> dict[str, Any]:
    from datasets import Dataset

    recs = episodes.load()
    order = [_key(g, s) for g in games for s in range(cfg.samples)]
    finished = [recs[k] for k in order if k in recs and recs[k]["status"] == "ok"]
    infra = [k for k in order if k in recs and recs[k]["status"] != "ok"]
    rows = [row for r in finished for row in r["rows"]]
    if not rows:
        raise HarnevoError(f"collect: no rows: the teacher won none of {len(finished)} episode(s) "
                           f"(use more games, another teacher, or --keep-failed)")
    ds = Dataset.from_list(rows)
    tmp = cfg.out / (DATASET + ".tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    ds.save_to_disk(str(tmp))
    final = cfg.out / DATASET
    if final.exists():
        import shutil

        shutil.rmtree(final)
    os.replace(tmp, final)
    wins = sum(r["success"] for r in finished)
    summary = {
        "harness": harness.name, "harness_id": harness.id, "behaviour_id": harness.behaviour_id,
        "teacher": cfg.teacher, "data_source": source, "split": games[0].split,
        "games": len(games), "episodes": len(finished), "wins": wins,
        "success_rate": wins / len(finished) if finished else 0.0,
        "episodes_kept": sum(bool(r["rows"]) for r in finished), "infra_errors": len(infra),
        "rows": len(rows), "tokens": sum(approx_row_tokens(r) for r in rows),
        "tokens_method": "approximate: 4 characters a token",
        "meta_action_rows": sum(1 for r in rows if _is_meta(r["completion"][0]["content"])),
        "perturbed_turns": sum(int(r.get("perturbed", 0)) for r in finished),
        "dataset": str(final),
    }
    write_manifest(cfg.out, "collect", inputs=inputs, complete=not infra, **summary)
    log(f"collect: {wins}/{len(finished)} episodes won ({100 * summary['success_rate']:.0f}%), "
        f"{len(rows)} rows, ~{summary['tokens']} tokens -> {final}")
    if infra:
        log(f"collect: {len(infra)} episode(s) hit an infrastructure error; re-run the same command to play them")
    return summary


def _is_meta(text: str) -> bool:
    from harnevo.harness.parse import parse_reply

    return parse_reply(text, meta_actions=True).meta is not None


def load_dataset_dir(path: Path):
    """A collected dataset: the stage's folder (with dataset/ inside) or the dataset folder itself."""
    from datasets import load_from_disk

    p = Path(path)
    cand = p / DATASET if (p / DATASET).is_dir() else p
    if not (cand / "state.json").is_file() and not (cand / "dataset_info.json").is_file():
        raise HarnevoError(f"--data {path}: no dataset there (expected the folder written by "
                           f"`harnevo train collect` or `train distill`)")
    ds = load_from_disk(str(cand))
    missing = [c for c in ("prompt", "completion") if c not in ds.column_names]
    if missing:
        raise HarnevoError(f"--data {path}: the dataset has no {', '.join(missing)} column(s)")
    if len(ds) == 0:
        raise HarnevoError(f"--data {path}: the dataset is empty")
    return ds


__all__ = ["DATASET", "EPISODES", "ExpertTeacher", "load_dataset_dir", "rows_of", "run_collect"]
