"""`harnevo report RUN`: what an evolution run did, gathered from its store, drawn and written as one page.

    RUN/report/index.html       one self-contained page (plots embedded as data URIs; opens offline)
    RUN/report/*.png            the plots on their own (plots.py)
    RUN/report/report.json      the figures the page shows, as data

`gather(store, run_dir)` reads only: the run's config and versions, every harness with its lineage, the
saved generations (population, front, per-candidate stats) and, for what no saved generation covers yet
(a run in progress: the candidates of the generation being evaluated), the episodes recorded so far. A run
that is still going, was killed or stopped at its budget is reported as far as it got, and says so.

Figures follow the run's own rules: a generation's best is `selection.best_of` over its front (as the
loop chooses it), success is over games with Wilson's 95% interval, the median of a generation is its
low-median candidate (an actual candidate, so its interval is a real one). Every figure names the model,
whether it is simulated, and the games. The output depends only on the store and the run folder's
best.yaml/summary.json: the same run gives the same files."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from harnevo.envs.families import FAMILIES
from harnevo.errors import HarnevoError
from harnevo.files import atomic_write
from harnevo.runtime.summary import wilson_rate

REPORT_DIR = "report"
INDEX = "index.html"
DATA = "report.json"
BUDGET_KNOBS = ("generations", "episodes", "budget_tokens", "budget_usd")


# --- the entry point ------------------------------------------------------------------------------------------
def write_report(run_dir: Path, out: Path | None = None) -> dict[str, Any]:
    """Gather, draw and write the report of the run in `run_dir` (into `out`, default RUN/report).
    Returns {"index": path, "plots": [paths], "data": path, "report": gathered data}."""
    from harnevo.population.store import STORE_FILE, Store

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise HarnevoError(f"no run folder {run_dir}")
    if not run_dir.is_dir():
        raise HarnevoError(f"{run_dir} is a file, not a run folder")
    if not (run_dir / STORE_FILE).is_file():
        raise HarnevoError(f"{run_dir} is not an evolution run (no {STORE_FILE}); give the --run-dir of "
                           f"`harnevo evolve`")
    store = Store.open(run_dir)
    try:
        data = gather(store, run_dir)
    finally:
        store.close()
    out = Path(out) if out is not None else run_dir / REPORT_DIR
    if out.exists() and not out.is_dir():
        raise HarnevoError(f"report folder {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    from harnevo.report import html, plots

    images = plots.run_plots(data)  # name -> PNG bytes, in page order
    paths = []
    for name, png in images.items():
        path = out / f"{name}.png"
        atomic_write(path, png, mode=0o644)
        paths.append(path)
    atomic_write(out / DATA, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False), mode=0o644)
    atomic_write(out / INDEX, html.run_page(data, images), mode=0o644)
    return {"index": out / INDEX, "plots": paths, "data": out / DATA, "report": data}


def print_written(result: dict[str, Any]) -> None:
    """What `harnevo report` prints: the run in one line and the files written."""
    from rich.markup import escape

    from harnevo.report.console import console

    console.print(escape(describe(result["report"])), soft_wrap=True, highlight=False)
    console.print(escape(f"report: {result['index']} (self-contained: opens offline); plots: "
                         f"{', '.join(p.name for p in result['plots'])}; data: {result['data'].name}"),
                  soft_wrap=True, highlight=False)


# --- gathering ------------------------------------------------------------------------------------------------
def gather(store, run_dir: Path) -> dict[str, Any]:
    """Everything the report shows, as JSON-able data (see the module docstring)."""
    from harnevo.evolve.selection import best_of

    cfg, versions = store.config(), store.versions()
    model = versions.get("model") or cfg.get("model", "?")
    rows = store.harness_rows()
    by_id = {r["behaviour_id"]: r for r in rows}
    gens = store.generations()
    last = gens[-1] if gens else None
    stats: dict[str, dict[str, Any]] = dict(last["stats"].get("candidates", {})) if last else {}
    for r in rows:  # candidates no saved generation has scored yet: from their episodes so far
        if r["behaviour_id"] not in stats:
            live = _live_stats(store, r["behaviour_id"], model)
            if live["games"] or live["infra_errors"]:
                stats[r["behaviour_id"]] = live
    objectives = list(cfg.get("objectives") or ["success"])
    front, provisional = _current_front(last, stats, objectives)
    eligible = {b: stats[b] for b in front if stats.get(b, {}).get("games", 0) > 0}
    best = best_of(eligible) if eligible else None
    seeds = [r["behaviour_id"] for r in rows if not r["parents"]]
    total_games = _total_games(cfg, stats, seeds)
    episodes_now = store.episode_count()
    state = _state(run_dir, cfg, last, rows, episodes_now)
    return {
        "run_dir": str(run_dir),
        "model": model,
        "simulated": bool(versions.get("simulated", str(model).startswith("sim/"))),
        "split": versions.get("split") or cfg.get("split"),
        "data_source": versions.get("data_source", "?"),
        "versions": {k: versions[k] for k in sorted(versions) if k not in ("model", "simulated", "split",
                                                                            "data_source")},
        "config": {k: cfg[k] for k in ("search", "population", "objectives", "seed", "seeds", "games", "racing",
                                       "minibatch", "race_margin", "max_steps") if k in cfg},
        "budget": _budget_knob(cfg),
        "total_games": total_games,
        "state": state,
        "spend": store.spend(),
        "episodes_in_store": episodes_now,
        "seeds": seeds,
        "best": best,
        "best_provisional": provisional,
        "best_stats": stats.get(best) if best else None,
        "front": [_candidate(b, stats, by_id, best, seeds) for b in front if b in stats],
        "candidates": [_candidate(r["behaviour_id"], stats, by_id, best, seeds) for r in rows
                       if r["behaviour_id"] in stats and stats[r["behaviour_id"]].get("games", 0) > 0],
        "generations": _generation_series(gens, by_id, state),
        "families": _family_table(store, model, [best] + [s for s in seeds if s != best] if best else seeds, by_id),
        "lineage": _lineage(store, best, stats) if best else [],
        "diff": _diff(store, best) if best else None,
    }


def _live_stats(store, bid: str, model: str) -> dict[str, Any]:
    """A candidate's figures from the episodes recorded so far (no generation has scored it yet)."""
    eps = store.episodes(bid, model)
    ok = [e for _, e in sorted(eps.items()) if e.ok]
    n = len(ok)
    rate = sum(e.success for e in ok) / n if n else 0.0
    lo, hi = wilson_rate(rate, n)
    d = max(n, 1)
    return {"behaviour_id": bid, "success": rate, "ci95": [lo, hi], "games": n,
            "tokens_per_episode": sum(e.prompt_tokens + e.completion_tokens for e in ok) / d,
            "cost_per_episode": sum(e.cost_usd for e in ok) / d,
            "meta_per_episode": sum(e.meta_actions for e in ok) / d,
            "complete": False, "stopped_early": False, "infra_errors": len(eps) - n, "in_progress": True}


def _current_front(last: dict | None, stats: dict, objectives: list[str]) -> tuple[list[str], bool]:
    """The last saved generation's front; before any is saved, a provisional one from the episodes so far."""
    if last is not None:
        return list(last["front"]), False
    from harnevo.evolve.selection import fitness_values, front_ids

    scored = {b: fitness_values(objectives, s) for b, s in stats.items() if s.get("games", 0) > 0}
    return front_ids(scored), True


def _total_games(cfg: dict, stats: dict, seeds: list[str]) -> int:
    """Games in the run's race order: what the seeds play in full (they are never raced)."""
    played = [stats[s]["games"] for s in seeds if s in stats and stats[s].get("complete")]
    return max(played) if played else int(cfg.get("games") or 0)


def _budget_knob(cfg: dict) -> dict[str, Any]:
    for k in BUDGET_KNOBS[1:]:
        if cfg.get(k) is not None:
            return {"knob": k, "limit": cfg[k]}
    return {"knob": "generations", "limit": cfg.get("generations") if cfg.get("generations") is not None else 10}


def _state(run_dir: Path, cfg: dict, last: dict | None, rows: list[dict], episodes_now: int) -> dict[str, Any]:
    """Finished (best.yaml and a summary.json written after the last episode) or not, and what no saved
    generation covers: the candidates registered after it and the episodes recorded since (a generation in
    progress, or the one a budget stopped)."""
    summary = _read_json(Path(run_dir) / "summary.json")
    finished = (summary is not None and (Path(run_dir) / "best.yaml").is_file()
                and summary.get("episodes_in_store") == episodes_now)
    saved = last["generation"] if last else None
    pending_gen = (saved + 1) if saved is not None else 0
    pending = [r["behaviour_id"] for r in rows if r["generation"] >= pending_gen]
    recorded = int(last["stats"].get("episodes", 0)) if last else 0
    pending_eps = max(0, episodes_now - recorded)
    open_gen = not finished or bool(pending) or pending_eps > 0
    return {"finished": finished, "last_generation": saved, "pending_generation": pending_gen if open_gen else None,
            "pending_candidates": pending, "pending_episodes": pending_eps,
            "stopped_by_budget": bool(finished and summary.get("stopped_by_budget")),
            "time": last["time"] if last else None}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def _candidate(bid: str, stats: dict, by_id: dict, best: str | None, seeds: list[str]) -> dict[str, Any]:
    s, r = stats[bid], by_id.get(bid, {})
    return {"behaviour_id": bid, "name": r.get("name", "?"), "operator": r.get("operator", "?"),
            "generation": r.get("generation"), "parents": r.get("parents", []), "seed": bid in seeds,
            "best": bid == best, "success": s["success"], "ci95": list(s["ci95"]), "games": s["games"],
            "tokens_per_episode": s.get("tokens_per_episode", 0.0), "cost_per_episode": s.get("cost_per_episode", 0.0),
            "meta_per_episode": s.get("meta_per_episode", 0.0), "complete": bool(s.get("complete")),
            "stopped_early": bool(s.get("stopped_early")), "below_floor": bool(s.get("below_floor")),
            "in_progress": bool(s.get("in_progress")),
            "infra_errors": int(s.get("infra_errors", 0))}


def _generation_series(gens: list[dict], by_id: dict, state: dict) -> list[dict[str, Any]]:
    """Per saved generation: best (of the front, by the loop's rule) and low-median candidate of the
    population, each with its interval; episodes played and saved by racing in that generation."""
    from harnevo.evolve.selection import best_of

    out = []
    prev_eps = prev_saved = 0
    for g in gens:
        cand = g["stats"].get("candidates", {})
        pop = [cand[b] for b in g["population"] if b in cand and cand[b].get("games", 0) > 0]
        front = {b: cand[b] for b in g["front"] if b in cand and cand[b].get("games", 0) > 0}
        best = best_of(front) if front else None
        med = None
        if pop:
            ordered = sorted(pop, key=lambda s: (s["success"], s["behaviour_id"]))
            low = statistics.median_low([s["success"] for s in ordered])
            med = next(s for s in ordered if s["success"] == low)
        eps, saved = int(g["stats"].get("episodes", prev_eps)), int(g["stats"].get("saved_by_racing", prev_saved))
        out.append({
            "generation": g["generation"], "population": len(g["population"]), "front": len(g["front"]),
            "best": best, "best_success": cand[best]["success"] if best else None,
            "best_ci95": list(cand[best]["ci95"]) if best else None, "best_games": cand[best]["games"] if best else 0,
            "median": med["behaviour_id"] if med else None, "median_success": med["success"] if med else None,
            "median_ci95": list(med["ci95"]) if med else None, "median_games": med["games"] if med else 0,
            "new_candidates": sum(1 for r in by_id.values() if r["generation"] == g["generation"]),
            "episodes_played": max(0, eps - prev_eps), "saved_by_racing": max(0, saved - prev_saved),
            "episodes_total": eps, "in_progress": False, "stopped_by_budget": False,
        })
        prev_eps, prev_saved = eps, saved
    if state["pending_generation"] is not None and (state["pending_candidates"] or state["pending_episodes"]):
        out.append({"generation": state["pending_generation"], "population": None, "front": None, "best": None,
                    "best_success": None, "best_ci95": None, "best_games": 0, "median": None,
                    "median_success": None, "median_ci95": None, "median_games": 0,
                    "new_candidates": len(state["pending_candidates"]), "episodes_played": state["pending_episodes"],
                    "saved_by_racing": 0, "episodes_total": prev_eps + state["pending_episodes"], "in_progress": True,
                    "stopped_by_budget": state["stopped_by_budget"]})
    return out


def _family_table(store, model: str, ids: list[str], by_id: dict) -> dict[str, Any]:
    """Per family success (Wilson 95% over the family's games) of the best and of each seed, from their ok
    episodes in the store."""
    rows = []
    seen_families: set[str] = set()
    for bid in ids:
        by_family: dict[str, list[bool]] = {}
        for _, e in sorted(store.episodes(bid, model).items()):
            if e.ok:
                by_family.setdefault(e.family, []).append(bool(e.success))
        fams = {}
        for fam, wins in by_family.items():
            rate = sum(wins) / len(wins)
            fams[fam] = {"games": len(wins), "success": rate, "ci95": list(wilson_rate(rate, len(wins)))}
        seen_families |= set(fams)
        rows.append({"behaviour_id": bid, "name": by_id[bid]["name"], "seed": not by_id[bid]["parents"],
                     "per_family": fams})
    order = [f for f in FAMILIES if f in seen_families] + sorted(seen_families - set(FAMILIES))
    return {"families": order, "rows": rows}


def _lineage(store, best: str, stats: dict) -> list[dict[str, Any]]:
    """The best harness's chain back to its seed (first parents), oldest first: operator, genes changed,
    and every other detail the operator recorded (the reflective mutator's evidence under "reflection")."""
    out = []
    for r in store.lineage(best):
        detail = dict(r.get("detail") or {})
        genes = detail.pop("genes", {}) or {}
        reflection = detail.pop("reflection", None)
        s = stats.get(r["behaviour_id"])
        out.append({"behaviour_id": r["behaviour_id"], "name": r["name"], "generation": r["generation"],
                    "operator": r["operator"], "parents": r["parents"],
                    "genes": {k: v for k, v in sorted(genes.items())}, "reflection": reflection,
                    "detail": {k: detail[k] for k in sorted(detail)},
                    "success": s["success"] if s else None, "ci95": list(s["ci95"]) if s else None,
                    "games": s["games"] if s else 0})
    return out


def _diff(store, best: str) -> dict[str, Any]:
    """A unified diff of the canonical YAML from the seed the best came from (its first-parent chain) to it."""
    from harnevo.population.export import diff

    seed = store.lineage(best)[0]
    return {"seed": seed["behaviour_id"], "seed_name": seed["name"], "best": best,
            "text": diff(store, seed["behaviour_id"], best) if seed["behaviour_id"] != best else ""}


# --- what the terminal shows ------------------------------------------------------------------------------------
def describe(data: dict[str, Any]) -> str:
    """One line: which run, how far it got, its best."""
    st = data["state"]
    sim = " (simulated)" if data["simulated"] else ""
    if st["finished"]:
        where = "finished" + (f", stopped by its budget in generation {st['pending_generation']}"
                              if st["stopped_by_budget"] and st["pending_generation"] is not None else "")
    else:
        where = (f"in progress or stopped: generation {st['pending_generation']} pending, "
                 f"{st['pending_episodes']} of its episodes recorded")
    best = "no candidate scored yet"
    if data["best"]:
        s = data["best_stats"]
        lo, hi = s["ci95"]
        best = (f"best {data['best']} {100 * s['success']:.1f}% [{100 * lo:.0f}-{100 * hi:.0f}] over {s['games']} "
                f"games" + (" (provisional)" if data["best_provisional"] else ""))
    last = st["last_generation"]
    return (f"run {data['run_dir']}: model {data['model']}{sim}, {data['total_games']} {data['split']} games; "
            f"generations saved: {'none' if last is None else last + 1} ({where}); {best}")


__all__ = ["write_report", "gather", "describe", "REPORT_DIR", "INDEX"]
