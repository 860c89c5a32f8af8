"""harnevo's generator of new ALFWorld games (synthetic: written without AI2-THOR).

A game is what ALFWorld's own data holds: `initial_state.pddl` (objects, receptacles, locations, facts),
`traj_data.json` (task type and parameters) and `game.tw-pddl`, the JSON object
{"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"} that the TextWorld engine plays,
built as ALFWorld builds it: the wheel's `alfred.pddl`, and its `alfred.twl2` grammar with the task
added by `alfworld.agents.utils.misc.add_task_to_grammar`. Scenes are ALFWorld's real floor plans
(`harnevo.envs.scenes`); task types go to the room types ALFWorld gives them.

Every draw is checked in the real engine before it is kept: it must load, and ALFWorld's handcoded
expert must win it within the step limit (the PDDL planner expert is the fallback, bounded in CPU seconds
so that its verdict does not depend on how busy the machine is).
The stored `walkthrough` is the shortest winning action list found: the generator's own direct plan
(it knows where it put everything, as the planner behind the official walkthroughs knows the whole
state) when the engine confirms it wins, else the expert's actions. Draws nobody wins are discarded and
counted.

Same seed, same bytes: per-game randomness comes from `random.Random` seeded with (seed, index,
attempt) (so the number of worker processes changes nothing), iteration is over sorted collections, and
no file holds a time stamp or an absolute path. (A planner run within a hair of its CPU budget could in
principle tip the other way on another machine.)
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from harnevo.envs import alfworld as aw
from harnevo.envs import scenes as sc
from harnevo.envs.families import FAMILIES, GAME_FILE, parse_families
from harnevo.envs.scenes import (APPLIANCE, FAMILY_ROOM_WEIGHTS, LOOK_TOGGLE, VERB, family_scenes, feasible_families,
                                 split_scenes, task_candidates)
from harnevo.errors import HarnevoError

GENERATOR_VERSION = 1
MANIFEST = "harnevo_generated.json"
STAGING = ".harnevo-staging"

@lru_cache(maxsize=1)
def _logic() -> tuple[str, str]:
    d = aw.alfworld_dir() / "data"
    return (d / "alfred.pddl").read_text(), (d / "alfred.twl2").read_text()


# --------------------------------------------------------------------------------------------------
# Tasks


@dataclass(frozen=True)
class Task:
    family: str
    object_target: str
    parent_target: str = ""   # destination receptacle type ("" for look)
    toggle_target: str = ""   # the lamp (look only)

    @property
    def task_type(self) -> str:
        return FAMILIES[self.family]

    @property
    def folder(self) -> str:
        return f"{self.task_type}-{self.object_target}-None-{self.parent_target or self.toggle_target}"

    def pddl_params(self) -> dict[str, Any]:
        return {"mrecep_target": "", "object_sliced": False, "object_target": self.object_target,
                "parent_target": self.parent_target, "toggle_target": self.toggle_target}


# --------------------------------------------------------------------------------------------------
# Names, PDDL, files


_MANGLE = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def mangle(name: str) -> str:
    """ALFWorld's PDDL spelling of a THOR id (PlannedGameState.fix_pddl_str_chars)."""
    return "".join(_MANGLE.get(ch, ch) for ch in name)


def display_names(scene: sc.Scene) -> dict[str, str]:
    """THOR id -> the name the engine shows ('cabinet 3'), numbered by ALFWorld's own Demangler."""
    Demangler = aw.alfworld_text().Demangler
    ids = {mangle(r.id).lower(): r.id for r in scene.receptacles}
    ids.update({mangle(o.id).lower(): o.id for o in scene.objects})
    infos = {k: SimpleNamespace(id=k) for k in sorted(ids)}
    dm = Demangler(game_infos=infos, shuffle=False)
    return {ids[k]: dm.demangle_alfred_name(k).strip() for k in sorted(ids)}


def problem_pddl(scene: sc.Scene, task: Task, problem_id: str) -> str:
    """initial_state.pddl in the structure of ALFWorld's games (sorted, so reproducible)."""
    goal_library = aw.alfworld_goals()
    c = sc._constants()
    static = sc.static_receptacle_types()
    const_objs = sorted(set(c.OBJECTS_SET) - static)
    ind = "        "
    typed = [o for o in scene.objects if o.typed]
    present = {o.type for o in typed}
    pick = sc.pickupable_types()
    act = c.VAL_ACTION_OBJECTS
    fridge_ids = {r.id for r in scene.receptacles if r.type == "Fridge"}

    lines = ["", f"(define (problem plan_{problem_id})", "(:domain alfred)", "(:objects", f"{ind}agent1 - agent"]
    lines += [f"{ind}{o} - object" for o in const_objs]
    lines += [f"{ind}{o}Type - otype" for o in const_objs]
    lines += [f"{ind}{r}Type - rtype" for r in sorted(static)]
    lines += [f"{ind}{mangle(o.id)} - object" for o in scene.objects]
    lines += [f"{ind}{mangle(r.id)} - receptacle" for r in scene.receptacles]
    lines += [f"{ind}{mangle(loc)} - location" for loc in scene.locations()]
    lines += [f"{ind})", "", "(:init", ""]

    def fact(*parts: str) -> str:
        return f"{ind}({' '.join(parts)})"

    R = scene.receptacles
    lines += [fact("receptacleType", mangle(r.id), f"{r.type}Type") for r in R]
    lines += [fact("objectType", mangle(o.id), f"{o.type}Type") for o in typed]
    for r in R:
        lines += [fact("canContain", f"{r.type}Type", f"{t}Type")
                  for t in sorted(present & set(c.VAL_RECEPTACLE_OBJECTS.get(r.type, ())))]
    lines += [fact("pickupable", mangle(o.id)) for o in typed if o.type in pick]
    lines += [fact("isReceptacleObject", mangle(o.id)) for o in typed if o.type in c.MOVABLE_RECEPTACLES_SET]
    lines += [fact("openable", mangle(r.id)) for r in R if r.openable]
    lines += ["", fact("atLocation", "agent1", mangle(scene.agent_loc)), ""]
    lines += [fact("cleanable", mangle(o.id)) for o in typed if o.type in act["Cleanable"]]
    lines += [fact("heatable", mangle(o.id)) for o in typed if o.type in act["Heatable"]]
    lines += [fact("coolable", mangle(o.id)) for o in typed if o.type in act["Coolable"]]
    lines += [fact("toggleable", mangle(o.id)) for o in typed if o.type in act["Toggleable"]]
    # ALFWorld marks the target objects that start in a fridge as already cool
    lines += [fact("isCool", mangle(o.id)) for o in typed
              if o.type == task.object_target and o.receptacle in fridge_ids]
    lines += [fact("sliceable", mangle(o.id)) for o in typed if o.type in act["Sliceable"]]
    lines += [fact("inReceptacle", mangle(o.id), mangle(o.receptacle)) for o in typed if o.receptacle]
    lines += [fact("receptacleAtLocation", mangle(r.id), mangle(r.loc)) for r in R]
    lines += [fact("objectAtLocation", mangle(o.id), mangle(o.loc)) for o in typed if o.loc]
    lines += [f"{ind})", ""]
    goal = goal_library.gdict[task.task_type]["pddl"].format(
        obj=task.object_target, recep=task.parent_target, toggle=task.toggle_target, mrecep="")
    return "\n".join(lines) + goal.replace("#", "-")


def _with_global_seed(seed: int, fn: Callable[[], Any]) -> Any:
    """ALFWorld's task-description helpers draw from Python's global `random`: seed it for the call
    and put the caller's state back."""
    state = random.getstate()
    random.seed(seed)
    try:
        return fn()
    finally:
        random.setstate(state)


def task_text(traj: dict, seed: int) -> tuple[str, str]:
    """(task description, grammar with the task added), both as ALFWorld makes them."""
    misc = aw.alfworld_text()
    add_task_to_grammar, get_templated_task_desc = misc.add_task_to_grammar, misc.get_templated_task_desc
    grammar_text = _logic()[1]
    desc = _with_global_seed(seed, lambda: get_templated_task_desc(traj))
    grammar = _with_global_seed(seed, lambda: add_task_to_grammar(grammar_text, traj))
    return desc, grammar


def game_json(problem: str, grammar: str, *, solvable: bool, walkthrough: list[str] | None) -> str:
    data = {"pddl_domain": _logic()[0], "grammar": grammar, "pddl_problem": problem, "solvable": solvable,
            "walkthrough": walkthrough}
    return json.dumps(data)


# --------------------------------------------------------------------------------------------------
# The generator's own direct plan (what the official walkthroughs are: a plan made knowing the state)


def direct_plan(scene: sc.Scene, task: Task, names: dict[str, str]) -> list[str]:
    """The shortest action list the generator can make from what it placed: fetch the target (opening
    its receptacle if closed), use the appliance, deliver (opening the destination if closed)."""
    recs = {r.id: r for r in scene.receptacles}
    targets = [o for o in scene.objects if o.type == task.object_target and o.receptacle]

    class S:
        def __init__(self):
            self.loc = scene.agent_loc
            self.opened: set[str] = set()
            self.acts: list[str] = []

        def go(self, rid: str):
            if recs[rid].loc != self.loc:
                self.acts.append(f"go to {names[rid]}")
                self.loc = recs[rid].loc

        def open(self, rid: str):
            if recs[rid].openable and rid not in self.opened:
                self.acts.append(f"open {names[rid]}")
                self.opened.add(rid)

        def fetch(self, o):
            self.go(o.receptacle)
            self.open(o.receptacle)
            self.acts.append(f"take {names[o.id]} from {names[o.receptacle]}")

        def put(self, o, rid: str):
            self.go(rid)
            self.open(rid)
            self.acts.append(f"move {names[o.id]} to {names[rid]}")

    best: list[str] | None = None

    def consider(acts: list[str]):
        nonlocal best
        if best is None or (len(acts), acts) < (len(best), best):
            best = acts

    if task.family == "look":
        lamps = [o for o in scene.objects if o.type == task.toggle_target and o.receptacle]
        for o in targets:
            for lamp in lamps:
                s = S()
                s.fetch(o)
                s.go(lamp.receptacle)
                s.acts.append(f"use {names[lamp.id]}")
                consider(s.acts)
        return best or []
    dests = [r.id for r in scene.receptacles if r.type == task.parent_target]
    apps = [r.id for r in scene.receptacles if r.type == APPLIANCE.get(task.family, "")]
    if task.family == "pick2":
        for o1 in targets:
            for o2 in targets:
                if o1.id == o2.id:
                    continue
                for d in dests:
                    s = S()
                    s.fetch(o1)
                    s.put(o1, d)
                    s.fetch(o2)
                    s.put(o2, d)
                    consider(s.acts)
        return best or []
    for o in targets:
        for d in dests:
            for app in (apps or [None]):
                s = S()
                s.fetch(o)
                if app is not None:
                    s.go(app)
                    s.acts.append(f"{VERB[task.family]} {names[o.id]} with {names[app]}")
                s.put(o, d)
                consider(s.acts)
    return best or []


# --------------------------------------------------------------------------------------------------
# Drawing one game


class NoTask(Exception):
    pass


@dataclass
class Draft:
    task: Task
    scene_num: int
    trial: str
    problem: str
    traj: dict
    grammar: str
    direct: list[str]

    @property
    def rel_dir(self) -> str:
        return f"{self.task.folder}-{self.scene_num}/{self.trial}"


def game_seed(seed: int, index: int, attempt: int) -> int:
    h = hashlib.sha256(f"harnevo-generate:{seed}:{index}:{attempt}".encode()).digest()
    return int.from_bytes(h[:8], "big")


def _weighted(rng: random.Random, items: list[tuple[str, float]]) -> str:
    total = sum(w for _, w in items)
    x = rng.random() * total
    for k, w in items:
        x -= w
        if x < 0:
            return k
    return items[-1][0]


def draw_game(rng: random.Random, family: str, scenes: list[int] | tuple[int, ...], trial: str,
              text_seed: int) -> Draft:
    rooms = family_scenes(family, scenes)
    if not rooms:
        raise NoTask(f"no scene among the given ones hosts a {family} task")
    room = _weighted(rng, [(r, FAMILY_ROOM_WEIGHTS[family][r]) for r in sorted(rooms)])
    scene_num = rng.choice(rooms[room])
    layout = sc.load_layout(scene_num)
    cands = sc.candidates(scene_num, family)
    obj = rng.choice(sorted({o for o, _ in cands}))
    dest = rng.choice(sorted({p for o, p in cands if o == obj}))
    task = (Task(family, obj, toggle_target=dest) if family == "look" else Task(family, obj, parent_target=dest))

    scene = sc.Scene(layout=layout, receptacles=sc.furnish_receptacles(layout, rng))
    counts = {obj: rng.randint(2, 4) if family == "pick2" else rng.randint(1, 3)}
    forbidden: dict[str, set[str]] = {}
    if family == "look":
        counts[LOOK_TOGGLE] = 1
    else:
        forbidden[obj] = {dest} | ({APPLIANCE[family]} if family in APPLIANCE else set())
    sc.furnish_objects(scene, rng, counts=counts, forbidden=forbidden)
    sc.place_agent(scene, rng)

    problem = problem_pddl(scene, task, trial)
    x, z, rot, hor = scene.agent_pose
    traj: dict[str, Any] = {
        "task_id": trial,
        "task_type": task.task_type,
        "pddl_params": task.pddl_params(),
        "scene": {"floor_plan": f"FloorPlan{scene_num}", "scene_num": scene_num,
                  "init_action": {"action": "TeleportFull", "horizon": hor, "rotateOnTeleport": True,
                                  "rotation": rot, "x": x, "y": 0.9, "z": z},
                  "dirty_and_empty": False, "object_poses": [], "object_toggles": [],
                  "random_seed": text_seed % (2 ** 31)},
    }
    desc, grammar = task_text(traj, text_seed)
    traj["turk_annotations"] = {"anns": [{"task_desc": desc, "high_descs": [], "votes": []}]}
    names = display_names(scene)
    return Draft(task=task, scene_num=scene_num, trial=trial, problem=problem, traj=traj, grammar=grammar,
                 direct=direct_plan(scene, task, names))


# --------------------------------------------------------------------------------------------------
# Worker: draw, write, check; retry until a draw is kept


@dataclass
class _Job:
    index: int
    family: str
    seed: int
    scenes: tuple[int, ...]
    staging: str
    max_steps: int
    expert_cpu_s: float
    planner_cpu_s: float
    max_attempts: int


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _build_one(job: _Job) -> dict[str, Any]:
    aw.enable_parse_cache()  # this is a worker process of ours: TextWorld's re-parsing is the hot spot
    t0 = time.monotonic()
    discards: list[str] = []
    errors: list[str] = []
    trial = f"trial_harnevo_s{job.seed}_{job.index:05d}"
    stage = Path(job.staging) / f"{job.index:05d}"
    for attempt in range(job.max_attempts):
        gseed = game_seed(job.seed, job.index, attempt)
        rng = random.Random(gseed)
        try:
            draft = draw_game(rng, job.family, job.scenes, trial, gseed)
        except NoTask:
            discards.append("no_task")
            continue
        except Exception as e:  # a bug in drawing: count it, keep going, say what it was
            discards.append("draw_error")
            errors.append(f"{type(e).__name__}: {e}"[:300])
            continue
        shutil.rmtree(stage, ignore_errors=True)
        gdir = stage / draft.trial
        gdir.mkdir(parents=True)
        _write(gdir / "initial_state.pddl", draft.problem)
        _write(gdir / "traj_data.json", json.dumps(draft.traj, indent=2, sort_keys=True) + "\n")
        _write(gdir / GAME_FILE, game_json(draft.problem, draft.grammar, solvable=False, walkthrough=None))
        game_file = str(gdir / GAME_FILE)
        plans = [draft.direct] if draft.direct else []
        chk = aw.check_game(game_file, plans, max_steps=job.max_steps, expert_cpu_s=job.expert_cpu_s,
                            planner_cpu_s=job.planner_cpu_s, seed=gseed)
        if not chk["loaded"]:
            discards.append("load_error")
            errors.append(chk["error"])
            continue
        wins: list[tuple[str, list[str]]] = []
        if chk["expert_actions"]:
            solver = "handcoded"
            wins.append(("handcoded", chk["expert_actions"]))
        elif chk["planner_actions"]:
            solver = "planner"
            wins.append(("planner", chk["planner_actions"]))
        else:
            discards.append("planner_timeout" if chk["planner_error"] == "timeout" else "unsolved")
            continue
        if plans and chk["plans_won"][0]:
            wins.append(("direct", draft.direct))
        order = {"direct": 0, "planner": 1, "handcoded": 2}
        source, walkthrough = min(wins, key=lambda w: (len(w[1]), order[w[0]]))
        traj = dict(draft.traj)
        traj["harnevo"] = {"synthetic": True, "generator": "harnevo.envs.generate", "version": GENERATOR_VERSION,
                           "seed": job.seed, "index": job.index, "attempt": attempt, "solver": solver,
                           "expert_steps": len(wins[0][1]), "walkthrough_source": source}
        _write(gdir / "traj_data.json", json.dumps(traj, indent=2, sort_keys=True) + "\n")
        _write(gdir / GAME_FILE, game_json(draft.problem, draft.grammar, solvable=True, walkthrough=walkthrough))
        return {"index": job.index, "ok": True, "family": job.family, "rel_dir": draft.rel_dir,
                "stage_dir": str(gdir), "scene": draft.scene_num, "discards": discards, "solver": solver,
                "walkthrough_source": source, "walkthrough_len": len(walkthrough), "errors": errors[-3:],
                "seconds": round(time.monotonic() - t0, 2)}
    shutil.rmtree(stage, ignore_errors=True)
    return {"index": job.index, "ok": False, "family": job.family, "discards": discards, "errors": errors[-3:],
            "seconds": round(time.monotonic() - t0, 2)}


# --------------------------------------------------------------------------------------------------
# The API


@dataclass
class GenerateReport:
    """What a generate() call did. `discards` counts rejected draws by reason: 'unsolved' (neither
    ALFWorld's handcoded expert nor its PDDL planner won it within the step limit), 'planner_timeout'
    (the handcoded expert failed and the planner ran out of its CPU budget), 'load_error' (the engine
    refused the game), 'no_task', 'draw_error' (a bug; see `errors`). `solvers` says which expert won
    the kept games, `walkthrough_sources` where their stored walkthrough comes from ('direct': the
    generator's own plan, confirmed in the engine, when it is the shortest)."""

    out_dir: str
    split: str
    requested: int
    games: int = 0
    families: dict[str, int] = field(default_factory=dict)
    discards: dict[str, int] = field(default_factory=dict)
    solvers: dict[str, int] = field(default_factory=dict)
    walkthrough_sources: dict[str, int] = field(default_factory=dict)
    scenes: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)   # indices no draw could fill
    errors: list[str] = field(default_factory=list)    # what went wrong in draws (load / draw errors), a few
    seconds: float = 0.0
    synthetic: bool = True

    @property
    def n_discarded(self) -> int:
        return sum(self.discards.values())

    @property
    def discard_rate(self) -> float:
        tried = self.games + self.n_discarded
        return self.n_discarded / tried if tried else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["n_discarded"] = self.n_discarded
        d["discard_rate"] = round(self.discard_rate, 4)
        return d


def split_dir(out_dir: str | os.PathLike, split: str) -> Path:
    return Path(out_dir) / "json_2.1.1" / split


def _resolve_scenes(scenes: list[int] | None) -> tuple[int, ...]:
    available = set(sc.all_scenes())
    if not available:
        raise HarnevoError("the alfworld wheel ships no scene layouts (alfworld/gen/layouts); reinstall alfworld")
    if scenes is None:
        return tuple(sorted(available))
    bad = sorted(set(scenes) - available)
    if bad:
        raise HarnevoError(f"unknown scenes {bad}: ALFWorld's floor plans are 1-30, 201-230, 301-330, 401-430")
    return tuple(sorted(set(scenes)))


def _family_plan(n_games: int, families: list[str]) -> list[str]:
    """Game index -> family: round robin, so every family gets n // k or n // k + 1 games."""
    return [families[i % len(families)] for i in range(n_games)]


def generate(out_dir: str | os.PathLike, n_games: int, *, families: list[str] | str | None = None, seed: int = 0,
             scenes: list[int] | None = None, split: str = "generated", workers: int = 1,
             progress: Callable[[dict], None] | None = None, max_steps: int = 50,
             expert_cpu_s: float = 60.0, planner_cpu_s: float = 5.0, max_attempts: int = 25,
             overwrite: bool = False) -> GenerateReport:
    """Write `n_games` new, engine-checked ALFWorld games to `out_dir/json_2.1.1/<split>/<task>-<params>/
    <trial>/` (initial_state.pddl, traj_data.json, game.tw-pddl), spread evenly over `families`
    (default: all six). Same arguments, same bytes (`workers` changes only the speed). Games are
    synthetic; the split folder's `harnevo_generated.json` says so. Raises HarnevoError on bad input or
    when the split folder already holds games (unless `overwrite`, which replaces that split)."""
    t0 = time.monotonic()
    if n_games < 0:
        raise HarnevoError("the number of games must be >= 0")
    fams = parse_families(families) or list(FAMILIES)
    pool = _resolve_scenes(scenes)
    feasible = set(feasible_families(pool))
    missing_fams = [f for f in fams if f not in feasible]
    if missing_fams:
        raise HarnevoError(f"the scenes given host no {', '.join(missing_fams)} task (rooms per family: "
                           + "; ".join(f"{f}: {', '.join(FAMILY_ROOM_WEIGHTS[f])}" for f in missing_fams) + ")")
    if not split or "/" in split or split.startswith("."):
        raise HarnevoError(f"bad split name {split!r}")
    out = Path(out_dir)
    sdir = split_dir(out, split)
    if sdir.exists() and any(sdir.iterdir()):
        if not overwrite:
            raise HarnevoError(f"{sdir} already holds games; choose another --out or split, or overwrite")
        shutil.rmtree(sdir)
    sdir.mkdir(parents=True, exist_ok=True)
    staging = out / STAGING / split
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    plan = _family_plan(n_games, fams)
    jobs = [_Job(index=i, family=f, seed=seed, scenes=pool, staging=str(staging), max_steps=max_steps,
                 expert_cpu_s=expert_cpu_s, planner_cpu_s=planner_cpu_s, max_attempts=max_attempts)
            for i, f in enumerate(plan)]
    report = GenerateReport(out_dir=str(out), split=split, requested=n_games)
    results: list[dict] = []

    def take(res: dict) -> None:
        results.append(res)
        for why in res["discards"]:
            report.discards[why] = report.discards.get(why, 0) + 1
        for err in res.get("errors", []):
            if err not in report.errors and len(report.errors) < 10:
                report.errors.append(err)
        if res["ok"]:
            final = sdir / res["rel_dir"]
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            os.replace(res["stage_dir"], final)
            report.games += 1
            report.families[res["family"]] = report.families.get(res["family"], 0) + 1
            report.solvers[res["solver"]] = report.solvers.get(res["solver"], 0) + 1
            src = res["walkthrough_source"]
            report.walkthrough_sources[src] = report.walkthrough_sources.get(src, 0) + 1
        else:
            report.missing.append(res["index"])
        if progress is not None:
            progress({"done": len(results), "total": n_games, "games": report.games,
                      "discarded": report.n_discarded, "index": res["index"], "family": res["family"],
                      "ok": res["ok"], "game": res.get("rel_dir"), "elapsed_s": round(time.monotonic() - t0, 1)})

    try:
        if jobs:
            n_workers = max(1, min(int(workers), len(jobs)))
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as ex:
                futures = [ex.submit(_build_one, j) for j in jobs]
                for fut in as_completed(futures):
                    take(fut.result())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:
            (out / STAGING).rmdir()
        except OSError:
            pass

    report.missing.sort()
    report.scenes = sorted({r["scene"] for r in results if r["ok"]})
    report.families = dict(sorted(report.families.items()))
    report.discards = dict(sorted(report.discards.items()))
    report.solvers = dict(sorted(report.solvers.items()))
    report.walkthrough_sources = dict(sorted(report.walkthrough_sources.items()))
    _write_manifest(sdir, report, seed=seed, families=fams, scenes=list(pool), max_steps=max_steps)
    report.seconds = time.monotonic() - t0
    return report


def _write_manifest(sdir: Path, report: GenerateReport, *, seed: int, families: list[str], scenes: list[int],
                    max_steps: int) -> None:
    data = {"synthetic": True, "generator": "harnevo.envs.generate", "version": GENERATOR_VERSION,
            "note": "games generated by harnevo from ALFWorld's scene layouts; not the official ALFWorld data",
            "seed": seed, "requested": report.requested, "games": report.games, "families": families,
            "scenes": scenes, "max_steps": max_steps, "discards": report.discards, "missing": report.missing,
            "engine": aw.engine_versions()}
    (sdir / MANIFEST).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_manifest(split_path: str | os.PathLike) -> dict | None:
    """The generator's manifest of a split folder, or None for official (or foreign) data."""
    p = Path(split_path) / MANIFEST
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def generate_held_out(out_dir: str | os.PathLike, n_train: int, n_unseen: int, *, seed: int = 0,
                      families: list[str] | str | None = None, scene_seed: int | None = None, per_room: int = 1,
                      splits: tuple[str, str] = ("train", "unseen"), workers: int = 1,
                      progress: Callable[[dict], None] | None = None, **kw) -> tuple[GenerateReport, GenerateReport]:
    """A train split and an unseen-style split whose scenes the train split never uses (see
    scenes.split_scenes), like ALFWorld's train / valid_unseen."""
    train_scenes, unseen_scenes = split_scenes(scene_seed, per_room=per_room)
    a = generate(out_dir, n_train, families=families, seed=seed, scenes=train_scenes, split=splits[0],
                 workers=workers, progress=progress, **kw)
    b = generate(out_dir, n_unseen, families=families, seed=seed + 1, scenes=unseen_scenes, split=splits[1],
                 workers=workers, progress=progress, **kw)
    return a, b


def _replay_stored(game_file: str) -> tuple[str, bool]:
    aw.enable_parse_cache()
    walkthrough = json.loads(Path(game_file).read_text(encoding="utf-8")).get("walkthrough") or []
    return game_file, bool(walkthrough) and aw.replay(game_file, walkthrough)


def verify_games(game_files: list[str], *, workers: int = 1) -> dict[str, bool]:
    """Replay each game's stored walkthrough from a fresh reset in the real engine (in worker
    processes); {game file: won}."""
    files = sorted(str(f) for f in game_files)
    if not files:
        return {}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, min(int(workers), len(files))), mp_context=ctx) as ex:
        return dict(ex.map(_replay_stored, files))



__all__ = ["generate", "generate_held_out", "verify_games", "GenerateReport", "split_scenes", "feasible_families",
           "read_manifest", "draw_game", "problem_pddl", "direct_plan", "task_candidates", "Task", "MANIFEST"]
