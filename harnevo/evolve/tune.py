"""`harnevo tune HARNESS`: Optuna over the numeric and categorical genes of one harness.

    harnevo tune bpe_always_on --model M --split train --games 48 --trials 40 --run-dir runs/t1

Search space (from the genome, harness/genome.py): every int and float gene and every categorical gene
except `mode` (a mode needs its blocks and panels, which evolve's operators keep coherent) that has an
effect on the harness (changing it alone changes the normal form). Int genes range from a quarter to four
times their value (at least +8), within the gene's bounds; with `--max-steps N` the step budget is tuned
at or below N; the float gene (temperature) spans its bounds in steps of 0.05. Trial 0 is the harness as
given, so the study starts from the user's point.

Samplers: one objective (`success`) TPE (`startup_trials` random trials first); two (`success,tokens` or
`success,cost`) NSGA-II (population `startup_trials`). Each is seeded afresh before every trial from (seed,
trial index), so the same seed and settings give the same trials whatever `--trials` is, and a resumed study
the same trials as one never stopped.

Each trial is an evaluation through the same CandidateEvaluator and Store as `harnevo evolve`: episodes are
committed as they finish and keyed by behaviour id, so trials that behave alike, a re-run and `resume`
never replay an episode. Racing becomes pruning: the games are played in the race order, and at every
racing checkpoint (after `minibatch` games, then every `race_step`) the success so far is reported with
`trial.report(success, step=games)`; `trial.should_prune()` (a MedianPruner that starts pruning after
`prune_after` finished trials) stops the trial, which is then PRUNED. Optuna has no pruning for several
objectives: there, evolve's racing rule against the front of finished trials decides, and a stopped trial
is PRUNED too. A trial whose genes make no valid harness is FAIL; a trial cut by an infrastructure error
(or a killed process) is FAIL with `retry` set and its parameters are asked again first on resume (it does
not count towards `--trials`).

The run folder:
    population.sqlite   the store (config with "command": "tune", harnesses, evaluations) AND the Optuna
                        study "harnevo-tune" (Optuna's tables sit beside the store's):
                        `optuna-dashboard sqlite:///runs/t1/population.sqlite`,
                        `optuna.load_study(study_name="harnevo-tune", storage="sqlite:///runs/t1/population.sqlite")`
    best.yaml           the best trial's harness (highest success, then fewest tokens per episode)
    best.experience.json  its learned Experience bank, when it keeps one
    summary.json        the trials and the best
Re-running the same command (or `harnevo resume RUN`) continues the study; a larger `--trials` adds trials."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harnevo.errors import HarnessError, HarnevoError
from harnevo.harness.spec import Harness

STUDY = "harnevo-tune"
BEST, BEST_BANK, SUMMARY = "best.yaml", "best.experience.json", "summary.json"
FLOAT_STEP = 0.05
_EXCLUDED = ("mode",)


class TuneConfig(BaseModel):
    """The validated settings of one `harnevo tune` run; `trials` is its one budget knob."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    harness: str = Field(description="the harness to tune (a seed name or a YAML file)")
    model: str = Field("sim/bounded", description="the model every trial is evaluated with")
    split: Optional[str] = Field(None, description="games (default valid_train when official data is found, else generated)")
    games: int = Field(48, ge=1, le=5000, description="a seeded sample of this many games")
    families: Optional[str] = Field(None, description="task families to keep, e.g. heat,cool")
    data: Optional[str] = Field(None, description="folder holding json_2.1.1 (default $ALFWORLD_DATA)")
    trials: int = Field(40, ge=1, le=100_000, description="budget: trials in all (a re-run with more adds trials)")
    seed: int = Field(0, description="seed of the game sample, the race order and the sampler")
    objectives: list[str] = Field(["success"], description="success (TPE) | success,tokens or success,cost (NSGA-II)")
    pruning: bool = Field(True, description="report success at each racing checkpoint and prune weak trials")
    minibatch: int = Field(12, ge=1, description="games before the first pruning check")
    race_step: int = Field(12, ge=1, description="games between pruning checks")
    prune_after: int = Field(2, ge=0, description="finished trials before the pruner prunes")
    startup_trials: int = Field(8, ge=2, le=1000, description="random trials before TPE models the space "
                                "(NSGA-II: its population size); not tied to `trials`, so more trials continue "
                                "the same sequence")
    concurrency: int = Field(8, ge=1, le=512, description="episodes in flight at once")
    workers: Optional[int] = Field(None, ge=1, description="engine worker processes (default: one per core)")
    experience_lag: int = Field(16, ge=1, description="episode i reads lessons of episodes 0..i-lag")
    max_steps: Optional[int] = Field(None, ge=1, le=500, description="most steps per episode: the step budget is "
                                     "tuned at or below it")
    api_base: Optional[str] = None
    price: Optional[tuple[float, float]] = None
    timeout_s: float = Field(60.0, gt=0)
    cache: Optional[str] = Field("default", description="reply cache file; 'default'; null: none")
    cache_tag: Optional[str] = None

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[str]) -> list[str]:
        if v not in (["success"], ["success", "tokens"], ["success", "cost"]):
            raise ValueError("objectives: success (TPE), or success,tokens / success,cost (NSGA-II)")
        return v

    def identity(self) -> dict[str, Any]:
        """What the store keeps and hashes: everything but the budget, so more trials continue the run."""
        data = self.model_dump(mode="json")
        data.pop("trials")
        return {"command": "tune", **data}


def parse_tune_config(data: dict[str, Any], *, source: str = "tune") -> TuneConfig:
    data = {k: v for k, v in data.items() if v is not None}
    data.pop("command", None)
    if isinstance(data.get("objectives"), str):
        data["objectives"] = [s.strip() for s in data["objectives"].split(",") if s.strip()]
    try:
        return TuneConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "extra_forbidden":
            raise HarnevoError(f"{source}: unknown setting {field!r}") from None
        raise HarnevoError(f"{source}: {field}: {err['msg'].removeprefix('Value error, ')}") from None


# --- the search space -------------------------------------------------------------------------------------------
def search_space(h: Harness, max_steps: int | None = None) -> dict[str, Any]:
    """{gene: optuna distribution} over the live numeric and categorical genes of `h` (module docstring)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    from harnevo.evolve.operators import _live, _probe
    from harnevo.harness.genome import genes_of, get, normalized_data

    ref = normalized_data(h)
    space: dict[str, Any] = {}
    for g in genes_of(h):
        if g.kind not in ("int", "float", "categorical") or g.name in _EXCLUDED:
            continue
        v = get(h, g)
        if g.name == "budget.max_steps" and max_steps is not None:
            lo, hi = max(1, min(v, max_steps) // 4), max_steps
            if lo < hi:
                space[g.name] = IntDistribution(lo, hi)
            continue
        if not _live(h, {g.name: _probe(g, v)}, ref):
            continue
        if g.kind == "int":
            lo = max(int(g.low if g.low is not None else 0), v // 4)
            hi = max(v * 4, v + 8)
            hi = int(min(hi, g.high)) if g.high is not None else hi
            if lo < hi:
                space[g.name] = IntDistribution(lo, hi)
        elif g.kind == "float":
            lo, hi = float(g.low or 0.0), float(g.high if g.high is not None else max(1.0, 4 * v))
            space[g.name] = FloatDistribution(lo, hi, step=FLOAT_STEP)
        else:
            space[g.name] = CategoricalDistribution(list(g.choices))
    if not space:
        raise HarnevoError(f"harness {h.name!r} has no numeric or categorical gene with an effect to tune")
    return space


def start_params(h: Harness, space: dict[str, Any]) -> dict[str, Any]:
    """The harness's own values (clipped into the space): trial 0."""
    from optuna.distributions import CategoricalDistribution

    from harnevo.harness.genome import get

    out = {}
    for name, d in space.items():
        v = get(h, name)
        if isinstance(d, CategoricalDistribution):
            out[name] = v
        else:
            v = min(max(v, d.low), d.high)
            out[name] = round(round(v / FLOAT_STEP) * FLOAT_STEP, 2) if d.step == FLOAT_STEP and isinstance(v, float) else v
    return out


def trial_harness(base: Harness, params: dict[str, Any], number: int) -> Harness:
    """The harness of one trial: `base` with these gene values, normalized (HarnessError when invalid)."""
    from harnevo.harness.genome import normalize, with_genes

    params = {k: round(v, 2) if isinstance(v, float) else v for k, v in params.items()}
    child = normalize(with_genes(base, params))
    data = child.model_dump(mode="json")
    data["name"] = f"{base.name.split('~', 1)[0][:180]}~t{number}"
    data["description"] = f"trial {number} of harnevo tune {base.name}"
    return Harness.validate_dict(data, source=data["name"])


# --- samplers, pruner, study ------------------------------------------------------------------------------------
def _sampler(cfg: TuneConfig, k: int):
    import optuna

    seed = (cfg.seed * 1_000_003 + k) % (2**32)
    if len(cfg.objectives) > 1:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=cfg.startup_trials)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=cfg.startup_trials)


def storage_url(run_dir: Path) -> str:
    return f"sqlite:///{(Path(run_dir) / 'population.sqlite').resolve()}"


def open_study(cfg: TuneConfig, run_dir: Path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(storage_url(run_dir), engine_kwargs={"connect_args": {"timeout": 30}})
    directions = ["maximize"] + ["minimize"] * (len(cfg.objectives) - 1)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=cfg.prune_after, n_warmup_steps=0)
    return optuna.create_study(study_name=STUDY, storage=storage, directions=directions, pruner=pruner,
                               sampler=_sampler(cfg, 0), load_if_exists=True)


class TrialBar:
    """Racing as pruning, in the shape CandidateEvaluator races against (`should_continue`): one objective
    reports the success so far and asks the pruner; several race against the front of finished trials."""

    def __init__(self, trial, front=None):
        self.trial, self.front = trial, front

    def should_continue(self, successes: int, played: int, total: int, costs: dict[str, float]) -> bool:
        if self.front is not None:
            return self.front.should_continue(successes, played, total, costs)
        self.trial.report(successes / played if played else 0.0, step=played)
        return not self.trial.should_prune()


def counted(study) -> list:
    """Trials that count towards the budget: finished, and not marked to be retried."""
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [t for t in study.get_trials(deepcopy=False) if t.state in done and not t.user_attrs.get("retry")]


def _requeue(study) -> int:
    """Trials left RUNNING by a killed process, or FAILed by an infrastructure error and not yet asked again:
    mark them to retry and enqueue their parameters. Returns how many."""
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False):
        stale = t.state == TrialState.RUNNING or (t.state == TrialState.FAIL and t.user_attrs.get("retry")
                                                   and not t.user_attrs.get("requeued"))
        if not stale:
            continue
        if t.state == TrialState.RUNNING:
            study._storage.set_trial_user_attr(t._trial_id, "retry", True)  # noqa: SLF001 (no public API)
            study.tell(t.number, state=TrialState.FAIL)
        study._storage.set_trial_user_attr(t._trial_id, "requeued", True)  # noqa: SLF001
        study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
        n += 1
    return n


# --- the run ------------------------------------------------------------------------------------------------------
def run_tune(cfg: TuneConfig, run_dir: Path, *, echo=print) -> dict[str, Any]:
    from harnevo.files import FolderLock

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise HarnevoError(f"--run-dir {run_dir} is a file, not a folder")
    created = not run_dir.exists()
    try:
        with FolderLock(run_dir, "run"):
            return asyncio.run(_run(cfg, run_dir, echo))
    except BaseException:
        if created and run_dir.is_dir() and [p.name for p in run_dir.iterdir()] == [".lock"]:
            (run_dir / ".lock").unlink()
            run_dir.rmdir()
        raise


def resume_tune(run_dir: Path, *, trials: int | None = None, echo=print) -> dict[str, Any]:
    """Continue a tune run with its own settings (and its recorded number of trials unless `trials`)."""
    import optuna

    from harnevo.population.store import Store

    run_dir = Path(run_dir)
    store = Store.open(run_dir)
    try:
        stored = dict(store.config())
    finally:
        store.close()
    if stored.get("command") != "tune":
        raise HarnevoError(f"{run_dir} holds an evolution run, not a tune run: use harnevo resume")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=STUDY, storage=storage_url(run_dir))
        recorded = int(study.user_attrs.get("trials", 0))
    except KeyError:
        recorded = 0
    cfg = parse_tune_config({**stored, "trials": trials or recorded or 1}, source=str(run_dir / "population.sqlite"))
    return run_tune(cfg, run_dir, echo=echo)


async def _run(cfg: TuneConfig, run_dir: Path, echo) -> dict[str, Any]:
    import optuna
    from optuna.trial import TrialState

    import harnevo
    from harnevo.envs.alfworld import engine_versions
    from harnevo.envs.pool import EnginePool
    from harnevo.evolve.candidates import COST_KEYS, Bar, CandidateEvaluator
    from harnevo.evolve.run import games_and_model
    from harnevo.harness.genome import normalize
    from harnevo.harness.spec import load_harness
    from harnevo.population.store import Store

    base = normalize(load_harness(cfg.harness))
    if cfg.max_steps is not None and base.budget.max_steps > cfg.max_steps:
        base = normalize(base.evolve(budget={"max_steps": cfg.max_steps}))
    space = search_space(base, cfg.max_steps)
    split, order, source, model = games_and_model(cfg)
    versions = {"harnevo": harnevo.__version__, **engine_versions(), "model": model.name,
                "simulated": model.simulated, "data_source": source, "split": split,
                "optuna": optuna.__version__}
    store = Store.create(run_dir, cfg.identity(), versions)
    costs = [o for o in cfg.objectives if o != "success"]
    t0 = time.perf_counter()
    played_before = store.episode_count()
    try:
        store.add_harness(base, parents=[], operator="seed", generation=0, detail={"seed": base.name})
        study = open_study(cfg, run_dir)
        study.set_user_attr("trials", cfg.trials)
        study.set_user_attr("harness", base.name)
        study.set_user_attr("space", {k: repr(v) for k, v in space.items()})
        requeued = _requeue(study)
        if not study.get_trials(deepcopy=False):
            study.enqueue_trial(start_params(base, space), user_attrs={"start": True})
        async with EnginePool(workers=cfg.workers) as pool:
            ev = CandidateEvaluator(store=store, model=model, engine=pool, order=order, concurrency=cfg.concurrency,
                                    racing=cfg.pruning, minibatch=cfg.minibatch, race_step=cfg.race_step,
                                    objectives=cfg.objectives, experience_lag=cfg.experience_lag)
            while len(counted(study)) < cfg.trials:
                k = len(counted(study))
                study.sampler = _sampler(cfg, k)
                trial = study.ask(space)
                params = dict(trial.params)
                try:
                    h = trial_harness(base, params, trial.number)
                except HarnessError as e:
                    trial.set_user_attr("error", " ".join(str(e).split())[:300])
                    study.tell(trial, state=TrialState.FAIL)
                    continue
                trial.set_user_attr("behaviour_id", h.behaviour_id)
                store.add_harness(h, parents=[base.behaviour_id], operator="tune", generation=trial.number + 1,
                                  detail={"trial": trial.number, "params": params})
                bar = None
                if cfg.pruning:
                    front = None
                    if costs:
                        members = [(t.values[0], {costs[0]: t.values[1]}) for t in study.best_trials]
                        front = Bar.of_front(members, 1.0) if members else None
                    bar = TrialBar(trial, front) if (front is not None or not costs) else None
                stats = (await ev.evaluate_all([h], bar))[h.behaviour_id]
                d = stats.as_dict()
                for key in ("success", "games", "tokens_per_episode", "cost_per_episode", "infra_errors"):
                    trial.set_user_attr(key, d[key])
                if stats.infra_errors:
                    trial.set_user_attr("retry", True)
                    study.tell(trial, state=TrialState.FAIL)
                elif stats.stopped_early:
                    study.tell(trial, state=TrialState.PRUNED)
                else:
                    values = [d["success"]] + [d[COST_KEYS[c]] for c in costs]
                    study.tell(trial, values if len(values) > 1 else values[0])
                echo(_trial_line(study.trials[trial.number], len(order)))
            summary = _finish(cfg, store, study, ev, base, run_dir, order, time.perf_counter() - t0,
                              store.episode_count() - played_before, requeued)
    finally:
        await model.aclose()
        store.close()
    return summary


def _trial_line(t, total: int) -> str:
    a = t.user_attrs
    state = t.state.name.lower()
    if "success" not in a:
        return f"trial {t.number:>3} {state:8s} {a.get('error', '')}"
    return (f"trial {t.number:>3} {state:8s} success {100 * a['success']:5.1f}% over {a['games']}/{total} games, "
            f"{a['tokens_per_episode']:.0f} tokens/episode")


def _best(cfg: TuneConfig, study):
    """The best finished trial: highest success, then fewest tokens (or dollars) per episode."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not done:
        return None
    cost = "cost_per_episode" if "cost" in cfg.objectives else "tokens_per_episode"
    return max(done, key=lambda t: (t.user_attrs["success"], -t.user_attrs[cost], -t.number))


def _finish(cfg, store, study, ev, base, run_dir: Path, order, wall, played_now, requeued) -> dict[str, Any]:
    from harnevo.files import atomic_write

    best = _best(cfg, study)
    best_h = store.harness(best.user_attrs["behaviour_id"]) if best is not None else base
    atomic_write(run_dir / BEST, best_h.to_yaml())
    bank = ev.learned_bank(best_h) if best is not None else None
    if bank is not None:
        atomic_write(run_dir / BEST_BANK, bank.to_json())
    trials = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        trials.append({"number": t.number, "state": t.state.name, "params": t.params,
                       **{k: a[k] for k in ("behaviour_id", "success", "games", "tokens_per_episode",
                                            "cost_per_episode", "error", "retry") if k in a}})
    states = [t["state"] for t in trials]
    summary = {
        "run_dir": str(run_dir), "harness": base.name, "model": cfg.model, "simulated": cfg.model.startswith("sim/"),
        "objectives": cfg.objectives, "sampler": "NSGA-II" if len(cfg.objectives) > 1 else "TPE",
        "trials": trials, "complete": states.count("COMPLETE"), "pruned": states.count("PRUNED"),
        "failed": states.count("FAIL"), "requeued_now": requeued, "games": len(order),
        "best_trial": best.number if best is not None else None,
        "best": ({"behaviour_id": best_h.behaviour_id, "params": best.params, **{k: best.user_attrs[k] for k in
                  ("success", "games", "tokens_per_episode", "cost_per_episode")}} if best is not None else None),
        "best_yaml": str(run_dir / BEST), "best_bank": str(run_dir / BEST_BANK) if bank is not None else None,
        "store": str(store.path), "storage": storage_url(run_dir), "study": STUDY,
        "episodes_in_store": store.episode_count(), "episodes_played_now": ev.played_now,
        "episodes_added_now": played_now, "wall_seconds": wall,
    }
    atomic_write(run_dir / SUMMARY, json.dumps(summary, indent=2))
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    """The trials as a table (rich; plain text without a terminal), then the best and where it is."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(100, Console().width))
    sim = " (simulated)" if summary["simulated"] else ""
    table = Table(title=f"harnevo tune {summary['harness']}: {summary['sampler']}, model {summary['model']}{sim}, "
                        f"{summary['games']} games", title_justify="left")
    for col in ("trial", "state", "success", "games", "tokens/ep", "params"):
        table.add_column(col, justify="right" if col in ("trial", "success", "games", "tokens/ep") else "left")
    rows = sorted(summary["trials"], key=lambda t: (-t.get("success", -1), t["number"]))
    start = summary["trials"][0]["params"] if summary["trials"] else {}
    for t in rows[:15]:
        mark = " *" if t["number"] == summary["best_trial"] else ""
        changed = {k: v for k, v in sorted(t["params"].items()) if t["number"] == 0 or v != start.get(k)}
        params = "as given" if t["number"] == 0 else ", ".join(
            f"{k.rsplit('.', 1)[-1]}={round(v, 2) if isinstance(v, float) else v}" for k, v in changed.items())
        table.add_row(f"{t['number']}{mark}", t["state"].lower(),
                      f"{100 * t['success']:.1f}%" if "success" in t else "-", str(t.get("games", "-")),
                      f"{t['tokens_per_episode']:.0f}" if "tokens_per_episode" in t else "-", params)
    console.print(table)
    console.print(f"trials: {summary['complete']} complete, {summary['pruned']} pruned, {summary['failed']} failed; "
                  f"episodes: {summary['episodes_in_store']} in the store, {summary['episodes_played_now']} played now; "
                  f"wall {summary['wall_seconds']:.0f}s")
    if summary["best"] is None:
        console.print("no trial finished: best.yaml is the harness as given")
    else:
        b = summary["best"]
        console.print(f"best: trial {summary['best_trial']} success {100 * b['success']:.1f}% over {b['games']} games, "
                      f"{b['tokens_per_episode']:.0f} tokens/episode -> {summary['best_yaml']}")
    console.print(f"study: optuna-dashboard {summary['storage']}  (study {summary['study']!r})")


__all__ = ["TuneConfig", "parse_tune_config", "run_tune", "resume_tune", "search_space", "start_params",
           "trial_harness", "open_study", "storage_url", "print_summary", "STUDY", "TrialBar"]
