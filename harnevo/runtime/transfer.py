"""The transfer table: `harnevo apply H --model a,b,c` (one harness, several models) and
`harnevo apply H1,H2 --model a,b` (the harness x model grid), in one command.

Each (harness, model) pair is one ordinary `apply` (runtime/apply.py, unchanged) into its own results
folder, so every pair is resumable and double-pays nothing; re-running the same command finishes what is
missing and rebuilds the table:

    OUT/<harness>/<model>/     one apply results folder per pair (summary.json, trajectories.jsonl, ...)
    OUT/transfer.json          the table: one entry per pair (model x family success with 95% CIs, tokens, cost)
    OUT/transfer.png           the plot: per-family bars (one harness) or the harness x model grid (several)
    OUT/.lock                  held while a process writes here

Pairs run one after another, harness-major, in the order given; every pair plays the same games (same split,
--games, --families and --seed). Every figure is labelled with its model, games, n, interval and whether the
model is simulated (`sim/...`). Options apply to every pair: `--budget-usd`/`--budget-tokens` bound each
pair's evaluation, not the total; `--bank` needs a single harness. Bad input (an unknown harness or model, an
empty or repeated name) is refused before any episode is played."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.runtime.summary import wilson_rate

TABLE = "transfer.json"
PLOT = "transfer.png"
FORMAT = "harnevo transfer table"
CI_METHOD = "Wilson 95% over games (samples of a game clustered)"


def split_names(text: str, what: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c']; an empty item or a repeated one is a one-line HarnevoError."""
    names = [p.strip() for p in text.split(",")]
    if any(not n for n in names):
        raise HarnevoError(f"{what} {text!r} has an empty name; separate names with single commas")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HarnevoError(f"{what} {text!r} names {repeated[0]!r} twice")
    return names


def slugs(names: list[str]) -> dict[str, str]:
    """A folder name for each name: its safe characters, with a short hash when two would collide."""
    base = {n: re.sub(r"[^A-Za-z0-9._-]+", "_", n).strip("._-") or "x" for n in names}
    out = {}
    for n in names:
        clash = sum(1 for m in names if base[m] == base[n]) > 1
        out[n] = base[n] + ("-" + hashlib.sha256(n.encode()).hexdigest()[:6] if clash else "")
    return out


def plan(opts) -> list[dict[str, Any]]:
    """The pairs to play, harness-major: {harness, model, out}."""
    harnesses = split_names(opts.harness, "HARNESS")
    models = split_names(opts.model, "--model")
    if len(harnesses) > 1 and opts.bank is not None:
        raise HarnevoError("--bank is one harness's Experience bank: give a single harness with it")
    hs, ms = slugs(harnesses), slugs(models)
    return [{"harness": h, "model": m, "out": Path(opts.out) / hs[h] / ms[m]} for h in harnesses for m in models]


def _check_inputs(pairs: list[dict[str, Any]], opts) -> None:
    """Load every harness and make every model once, so a typo fails before any episode is played."""
    import asyncio

    from harnevo.evolve.refs import is_run_ref, resolve
    from harnevo.harness.spec import load_harness
    from harnevo.models import get_model

    for h in dict.fromkeys(p["harness"] for p in pairs):
        resolve(h) if is_run_ref(h) else load_harness(h)
    for m in dict.fromkeys(p["model"] for p in pairs):
        model = get_model(m, api_base=opts.api_base, timeout_s=opts.timeout_s, price=opts.price,
                          cache_tag=opts.cache_tag)
        asyncio.run(model.aclose())


def run_transfer(opts) -> dict[str, Any]:
    """Play every (harness, model) pair of `opts` (an ApplyOptions whose harness and/or model hold commas),
    write transfer.json and transfer.png into opts.out, print the table; returns the table."""
    from harnevo.files import FolderLock, atomic_write
    from harnevo.report.console import console
    from harnevo.report.plots import transfer as transfer_plot
    from harnevo.report.transfer_view import print_transfer, render_text
    from harnevo.runtime.apply import run_apply
    from harnevo.runtime.results import RUN

    out = Path(opts.out)
    if out.exists() and not out.is_dir():
        raise HarnevoError(f"--out {out} is a file, not a folder")
    if (out / RUN).is_file():
        raise HarnevoError(f"--out {out} holds a single evaluation ({RUN}); give a new folder for a transfer table")
    pairs = plan(opts)
    created = not out.exists()
    try:
        with FolderLock(out, "transfer folder"):
            _check_inputs(pairs, opts)
            summaries = []
            for i, p in enumerate(pairs, 1):
                console.print(f"[bold]transfer {i}/{len(pairs)}[/]: {p['harness']} x {p['model']} -> {p['out']}",
                              soft_wrap=True, markup=True, highlight=False)
                summaries.append(run_apply(replace(opts, harness=p["harness"], model=p["model"], out=p["out"])))
            table = build_table(pairs, summaries, opts)
            atomic_write(out / TABLE, json.dumps(table, indent=2, ensure_ascii=False))
            atomic_write(out / PLOT, transfer_plot(table), mode=0o644)
    except BaseException:
        if created and out.is_dir() and [q.name for q in out.iterdir()] == [".lock"]:  # refused: leave nothing
            (out / ".lock").unlink()
            out.rmdir()
        raise
    print_transfer(table)
    console.print(f"transfer table: {out / TABLE}, {out / PLOT}", soft_wrap=True, highlight=False)
    table["text"] = render_text(table)
    return table


def _cell(rate: float, games: int) -> dict[str, Any]:
    return {"success": rate, "ci95": list(wilson_rate(rate, games)), "games": games}


def entry(pair: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """One pair's row of the table, from its apply summary."""
    per_family = {f: {**_cell(v["success_rate"], v["games"]), "episodes": v["episodes"]}
                  for f, v in s["per_family"].items()}
    return {
        "harness": pair["harness"], "harness_name": s.get("harness_name"), "behaviour_id": s.get("behaviour_id"),
        "harness_id": s.get("harness_id"), "model": s["model"], "simulated": bool(s.get("simulated")),
        "split": s.get("split"), "data_source": s.get("data_source"), "out": str(pair["out"]),
        "all": {"success": s["success_rate"], "ci95": list(s["ci95"]), "games": s["games"],
                "episodes": s["episodes"], "successes": s.get("successes")},
        "per_family": per_family,
        "tokens_per_episode": s.get("tokens_per_episode", 0.0), "prompt_tokens": s.get("prompt_tokens", 0),
        "completion_tokens": s.get("completion_tokens", 0), "cost_usd": s.get("cost_usd", 0.0),
        "cost_usd_per_episode": s.get("cost_usd_per_episode", 0.0), "spent_usd": s.get("spent_usd", 0.0),
        "priced": s.get("priced"), "mean_steps": s.get("mean_steps"),
        "meta_actions_per_episode": s.get("meta_actions_per_episode"), "infra_errors": s.get("infra_errors", 0),
        "complete": bool(s.get("complete", True)) and not s.get("stopped_by_budget"),
        "stopped_by_budget": bool(s.get("stopped_by_budget")),
    }


def build_table(pairs: list[dict[str, Any]], summaries: list[dict[str, Any]], opts) -> dict[str, Any]:
    from harnevo.envs.families import FAMILIES

    entries = [entry(p, s) for p, s in zip(pairs, summaries)]
    seen = {f for e in entries for f in e["per_family"]}
    splits = sorted({e["split"] for e in entries if e["split"]})
    sources = sorted({e["data_source"] for e in entries if e["data_source"]})
    first = summaries[0] if summaries else {}
    return {
        "format": FORMAT, "schema": 1,
        "command": _command(opts),
        "harnesses": list(dict.fromkeys(p["harness"] for p in pairs)),
        "models": list(dict.fromkeys(p["model"] for p in pairs)),
        "split": ", ".join(splits), "data_source": "; ".join(sources),
        "games_requested": opts.games, "families_requested": opts.families, "seed": opts.seed,
        "samples": opts.samples, "ci_method": CI_METHOD,
        "versions": {k: first.get(k) for k in ("alfworld", "textworld") if k in first},
        "families": [f for f in FAMILIES if f in seen] + sorted(seen - set(FAMILIES)),
        "entries": entries,
    }


def _command(opts) -> str:
    bits = ["harnevo apply", opts.harness, "--model", opts.model]
    for flag, value in (("--split", opts.split), ("--games", opts.games), ("--families", opts.families),
                        ("--seed", opts.seed if opts.seed else None),
                        ("--samples", opts.samples if opts.samples != 1 else None),
                        ("--max-steps", opts.max_steps), ("--data", opts.data)):
        if value is not None:
            bits += [flag, str(value)]
    bits += ["--out", str(opts.out)]
    return " ".join(bits)


__all__ = ["run_transfer", "plan", "split_names", "slugs", "build_table", "entry", "TABLE", "PLOT"]
