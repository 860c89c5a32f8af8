"""`harnevo train distill`: agent-as-harness distillation (Harness-Zero).

A *student* acts under the `minimal` harness (task, observation, admissible actions). Before each of its
actions reaches the engine (the session's supervisor hook), a *supervisor* model approves it or replaces
it with an admissible action. The supervisor follows the evolved harness's rules as a private
instruction: `HarnessSupervisor` keeps its own view of the episode under that harness (its Workspace,
history window and panels, fed by the same engine observations) and renders the harness's own system and
turn messages, with a note that it supervises a student and the student's proposed command; its reply
'Action: <command>' is the command to run. A reply that names no admissible command approves the
student's command when that one is admissible; otherwise the closest admissible command to what the
supervisor (or else the student) wrote is run, so every executed action is admissible. A student reply
that names no command at all proposes nothing: the supervisor chooses the command (an intervention), and
the turn goes to the engine with it (a student that cannot yet write the format is still corrected).

The corrected trajectories become an SFT dataset in the form `train collect` writes: one row per
executed action, `prompt` = the student's messages (its context under `minimal`), `completion` = the
final (approved or replaced) action in the student harness's reply format. Where that format asks for a
thought and the supervisor sees the game through the same prompt program as the student (the same harness
up to sampling settings: DAgger of a student under its own teacher's harness), the target's thought is the
supervisor's own for that command, as in a `train collect` row; otherwise it is a plain gloss of the
command (`default_thought`), since a thought written from a richer view may name what the student's
prompt does not show.

With `supervisor_executes` below 1 (DAgger, Ross et al. 2011) the supervisor still chooses a command every
turn and that command is the row's target, but it is run only with that chance per turn (seeded by game
and sample); otherwise the student's own command runs when it is admissible. The data then holds the
states the student's own mistakes lead to, each labelled with what the supervisor would do there. The
student may act under any harness without meta-actions (`minimal`, `react`, an `always_on` harness whose
panels the session keeps); the supervisor sees the episode under its own harness. The manifest reports the
intervention rate (replaced / reviewed actions) per episode and overall, and the success rate with the
supervisor and, with `baseline`, of the student alone on the same games.

Output folder: `episodes.jsonl` (resumable, as in collect), `dataset/`, `manifest.json`.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from harnevo.errors import HarnevoError, ModelCallError
from harnevo.train.collect import DATASET, EPISODES, EpisodeLog, approx_row_tokens
from harnevo.train.common import format_reply, load_train_harness, quiet_environment, resolve_stage_games, thought_of
from harnevo.train.config import DistillConfig
from harnevo.train.manifest import finished_before, write_manifest

SUPERVISOR_NOTE = (
    "\n\nYou are the supervisor of a student agent that plays this game. You see the game through the rules and "
    "workspace above; the student sees much less. Each turn the student proposes a command. Reply with the "
    "command to run, in the form 'Action: <command>': the student's command to approve it, or a better "
    "command from the admissible actions to replace it.")


class HarnessSupervisor:
    """A `Supervisor` (runtime/session.py) for one episode: `model` under `harness`'s rules."""

    def __init__(self, harness, model, *, sample: int = 0, bank=None, executes: float = 1.0, seed: str = "",
                 keep_thoughts: bool = False):
        from harnevo.runtime.session import HarnessProgram

        self.harness, self.model, self.sample = harness, model, sample
        self.executes = executes  # the chance per turn that the supervisor's command runs (DAgger below 1)
        self.rng = random.Random(f"dagger/{seed}/{sample}")
        self.labels: dict[int, str] = {}  # turn index -> the supervisor's command (the row's target)
        self.keep_thoughts = keep_thoughts  # keep the supervisor's thought for its own command (same view)
        self.thoughts: dict[int, str] = {}  # turn index -> that thought
        self.program = HarnessProgram(harness)
        self.bank = bank
        self.ws = None
        self.task = self.room = ""
        self.history: list[Any] = []
        self._seen: Any = None
        self._pending: str | None = None
        self.reviews = self.replaced = 0
        self.preset: str | None = None  # a command already chosen for a reply that proposed none

    def _observe(self, obs) -> None:
        from harnevo.harness.task import parse_task_goal, split_first_observation
        from harnevo.harness.workspace import Workspace
        from harnevo.runtime.session import _Step

        if obs is self._seen:
            return
        self._seen = obs
        if self.ws is None:
            self.room, self.task = split_first_observation(obs.text)
            bank = self.bank.snapshot() if self.bank is not None and self.harness.memory.experience else None
            self.ws = Workspace.start(self.harness.memory, parse_task_goal(self.task), self.room, bank)
            return
        self.ws.observe(obs.text)
        if self._pending is not None:
            self.history.append(_Step(self._pending, obs.text))
            self._pending = None

    async def review(self, action: str, prompt) -> str:
        from harnevo.harness.guard import guard

        if self.preset is not None and action == self.preset:
            self.preset = None
            return action  # chosen (and counted) by choose() for this very turn
        obs = prompt.observation
        self._observe(obs)
        admissible = list(obs.admissible)
        last = self.history[-1] if self.history else None
        ctx = self.program.context(self.ws, task=self.task, room=self.room,
                                   observation=last.observation if last else self.room,
                                   last_action=last.action if last else "", admissible=admissible,
                                   history=self.history, step=prompt.step)
        try:
            messages = await asyncio.to_thread(self.program.renderer.messages, ctx)
        except Exception as e:  # a harness over its render budget: the supervisor cannot see; approve
            raise ModelCallError(f"the supervisor's harness failed to render: {e}") from None
        messages = [dict(m) for m in messages]
        messages[0]["content"] += SUPERVISOR_NOTE
        messages[-1]["content"] += f"\n\nThe student proposes: {action}\nThe command to run:"
        reply = await self.model.complete(messages, temperature=0.0, max_tokens=self.harness.model.max_tokens,
                                          sample=self.sample)
        choice = self.program.parse(reply.text).action
        if choice and choice in admissible:
            final = choice
        elif action in admissible:
            final = action
        else:
            g = guard("nearest_admissible", choice or action, admissible)
            final = g.action or ("look" if "look" in admissible or not admissible else admissible[0])
        self.reviews += 1
        self.replaced += int(final != action)
        self.labels[prompt.turn] = final
        thought = thought_of(reply.text) if self.keep_thoughts and final == choice else None
        if thought:
            self.thoughts[prompt.turn] = thought
        run = final
        if self.executes < 1.0 and action in admissible and self.rng.random() >= self.executes:
            run = action  # DAgger: the student's own command runs; the supervisor's is the target
        self._pending = run
        return run


    async def choose(self, prompt) -> str:
        """The command for a turn whose student reply named none (counted as reviewed and replaced)."""
        self.preset = None
        final = await self.review("", prompt)
        self.preset = final
        return final


async def play_supervised(program, student, pool, game, sup: HarnessSupervisor | None):
    """One episode of `student` under `program`, reviewed by `sup` (None: the student alone). Returns the
    trajectory and the student's own reply of every turn."""
    from harnevo.models.base import Reply
    from harnevo.runtime.episode import model_policy, play
    from harnevo.runtime.session import EpisodeSession

    session = EpisodeSession(program, pool, model_name=student.name, simulated=student.simulated, supervisor=sup)
    own: list[str] = []
    ask = model_policy(student, session)

    async def policy(prompt):
        reply = await ask(prompt)
        if reply is None:
            return None
        own.append(reply.text)
        if sup is not None and program.parse(reply.text).error:
            try:
                choice = await sup.choose(prompt)
            except ModelCallError as e:
                session.fail_infra(f"model call failed: supervisor: {e}")
                return None
            reply = Reply(text=format_reply(program.harness, choice), usage=reply.usage,
                          latency_s=reply.latency_s, finish_reason=reply.finish_reason)
        return reply

    await play(session, game, policy)
    return session.trajectory, own


def rows_of(traj, student_harness, label: str, own: list[str],
            labels: dict[int, str] | None = None, thoughts: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """One row per executed action; its target is the supervisor's command of that turn (`labels`, by turn),
    which is the executed one unless the student's own ran (DAgger), with the supervisor's thought for it
    (`thoughts`, by turn) where there is one, else a gloss of the command."""
    rows = []
    for i, t in enumerate(traj.turns):
        if not t.executed:
            continue
        proposed = own[i] if i < len(own) else t.reply
        target = (labels or {}).get(i, t.executed)
        note = "chose for an unreadable reply" if proposed != t.reply else (t.supervisor or "")
        if target != t.executed:
            note = f"labelled; the student's '{t.executed}' ran"
        rows.append({"prompt": [dict(m) for m in t.messages],
                     "completion": [{"role": "assistant",
                                     "content": format_reply(student_harness, target, (thoughts or {}).get(i))}],
                     "game": traj.game, "sample": traj.sample, "turn": i, "harness_id": student_harness.id,
                     "teacher": label, "proposed": proposed, "supervisor": note})
    return rows


def run_distill(cfg: DistillConfig, log=print) -> dict[str, Any]:
    quiet_environment()
    harness, bank = load_train_harness(cfg.harness, max_steps=cfg.max_steps)
    student_h, _ = load_train_harness(cfg.student_harness, max_steps=cfg.max_steps)
    if student_h.mode == "inline":
        raise HarnevoError(f"--student-harness {cfg.student_harness}: the student acts without meta-actions "
                           f"(mode env_only, like `minimal`, or always_on), not mode inline")
    cfg.out.mkdir(parents=True, exist_ok=True)
    games, source = resolve_stage_games(cfg, cfg.out, log=log)
    inputs = {"harness": cfg.harness, "harness_id": harness.id, "supervisor": cfg.supervisor,
              "student": cfg.student, "student_harness_id": student_h.id, "games": [g.name for g in games],
              "split": games[0].split, "baseline": cfg.baseline, "keep_failed": cfg.keep_failed,
              "supervisor_executes": cfg.supervisor_executes}
    prior = finished_before(cfg.out, "distill", inputs, log)
    if prior is not None:
        return prior
    write_manifest(cfg.out, "distill", inputs=inputs, data_source=source, complete=False)
    episodes = EpisodeLog(cfg.out / EPISODES)
    done = {k for k, r in episodes.load().items() if r["status"] == "ok"}
    kinds = ["supervised"] + (["alone"] if cfg.baseline else [])
    todo = [(g, kind) for kind in kinds for g in games if _key(g, kind) not in done]
    if todo:
        log(f"distill: {len(todo)} episode(s) to play (student {cfg.student} under {student_h.name}, "
            f"supervisor {cfg.supervisor} under {harness.name})")
        asyncio.run(_play(cfg, harness, bank, student_h, todo, episodes))
    return _finish(cfg, harness, student_h, games, kinds, source, inputs, episodes, log)


def same_prompt_program(a, b) -> bool:
    """Whether harnesses `a` and `b` render the same prompts: equal up to name, description and the model's
    sampling settings."""
    return a.evolve(model=b.model.model_dump(mode="json")).behaviour_id == b.behaviour_id


def _key(game, kind: str) -> str:
    return f"{kind}/{game.split}/{game.name}"


async def _play(cfg: DistillConfig, harness, bank, student_h, todo, episodes: EpisodeLog) -> None:
    from harnevo.envs.pool import EnginePool
    from harnevo.harness.experience import ExperienceBank
    from harnevo.models import get_model
    from harnevo.runtime.session import HarnessProgram

    student = get_model(cfg.student, api_base=cfg.api_base)
    supervisor_model = get_model(cfg.supervisor, api_base=cfg.api_base)
    program = HarnessProgram(student_h)
    same_view = same_prompt_program(harness, student_h)
    sup_bank = bank or ExperienceBank(None, size=harness.memory.experience_bank_size)
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(game, kind, pool) -> None:
        async with sem:
            sup = HarnessSupervisor(harness, supervisor_model, bank=sup_bank, executes=cfg.supervisor_executes,
                                    seed=game.name, keep_thoughts=same_view) if kind == "supervised" else None
            traj, own = await play_supervised(program, student, pool, game, sup)
            rows = rows_of(traj, student_h, f"distill:{cfg.supervisor}", own, sup.labels, sup.thoughts) \
                if kind == "supervised" and traj.ok and (traj.success or cfg.keep_failed) else []
            reviewed = sup.reviews if sup is not None else 0
            replaced = sup.replaced if sup is not None else 0
            episodes.append({"key": _key(game, kind), "kind": kind, "game": game.name, "status": traj.status,
                             "success": traj.success, "reason": traj.reason, "steps": traj.steps,
                             "reviewed": reviewed, "interventions": replaced,
                             "intervention_rate": replaced / reviewed if reviewed else 0.0,
                             "invalid_replies": traj.invalid_replies, "rows": rows})

    try:
        async with EnginePool(workers=cfg.workers) as pool:
            await asyncio.gather(*(one(g, k, pool) for g, k in todo))
    finally:
        await student.aclose()
        await supervisor_model.aclose()


def _finish(cfg, harness, student_h, games, kinds, source, inputs, episodes: EpisodeLog, log) -> dict[str, Any]:
    import shutil

    from datasets import Dataset

    recs = episodes.load()
    by_kind = {k: [recs[_key(g, k)] for g in games if _key(g, k) in recs and recs[_key(g, k)]["status"] == "ok"]
               for k in kinds}
    sup = by_kind["supervised"]
    rows = [row for r in sup for row in r["rows"]]
    if not rows:
        raise HarnevoError("distill: no rows: no supervised episode executed an action (see episodes.jsonl)")
    tmp, final = cfg.out / (DATASET + ".tmp"), cfg.out / DATASET
    if tmp.exists():
        shutil.rmtree(tmp)
    Dataset.from_list(rows).save_to_disk(str(tmp))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    reviewed = sum(r["reviewed"] for r in sup)
    interventions = sum(r["interventions"] for r in sup)

    def rate(recs_: list[dict[str, Any]]) -> float | None:
        return sum(r["success"] for r in recs_) / len(recs_) if recs_ else None

    summary = {
        "harness": harness.name, "harness_id": harness.id, "student_harness": student_h.name,
        "supervisor": cfg.supervisor, "student": cfg.student, "data_source": source, "games": len(games),
        "rows": len(rows), "tokens": sum(approx_row_tokens(r) for r in rows),
        "tokens_method": "approximate: 4 characters a token",
        "intervention_rate": interventions / reviewed if reviewed else 0.0,
        "interventions": interventions, "reviewed": reviewed,
        "intervention_rate_per_episode": {r["game"]: r["intervention_rate"] for r in sup},
        "success_with_supervisor": rate(sup), "success_student_alone": rate(by_kind.get("alone", [])),
        "dataset": str(final),
    }
    missing = sum(len(games) - len(v) for v in by_kind.values())
    write_manifest(cfg.out, "distill", inputs=inputs, complete=not missing, **summary)
    alone = summary["success_student_alone"]
    dagger = cfg.supervisor_executes < 1.0
    did = (f"disagreed with {interventions}/{reviewed} of the student's commands" if dagger else
           f"replaced {interventions}/{reviewed} actions")
    log(f"distill: {len(rows)} rows; supervisor {did} ({100 * summary['intervention_rate']:.0f}%); "
        f"success with supervisor {100 * summary['success_with_supervisor']:.0f}%"
        + (f" (its command run with chance {cfg.supervisor_executes})" if dagger else "")
        + (f", student alone {100 * alone:.0f}%" if alone is not None else ""))
    if missing:
        log(f"distill: {missing} episode(s) hit an infrastructure error; re-run the same command to play them")
    return summary


__all__ = ["HarnessSupervisor", "SUPERVISOR_NOTE", "run_distill", "same_prompt_program"]
