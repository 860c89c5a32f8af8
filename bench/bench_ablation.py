"""One-factor ablation: from `react`, add one thing at a time, and measure each step on the same games.

    python bench/bench_ablation.py --data ../shared/alfworld --split valid_seen --model sim/bounded

Rows (each differs from the row above it in exactly one factor, made with the genome's `with_genes`, so
the harness is validated like a file):
  react                       the seed: history of 8 steps, admissible actions hidden, no guard, no panels
  + admissible actions shown  turn block `admissible` + system block `admissible_rule`
  + guard                     guard nearest_admissible, its note shown (turn block `guard_note`)
  + longer history            memory.history_window 8 -> 30
  + Belief                    mode always_on, memory.belief, turn block `belief`
  + Progress                  memory.progress, turn block `progress`
  + Experience                memory.experience, turn block `experience` (the bank learns within the run)
and, for reference, the seed `bpe_always_on` (which also has a 3-step history and other system blocks).

Prints a markdown table: success with the Wilson 95% interval over games, the change from the row
above, mean steps, tokens per episode, behaviour id. `sim/...` models are simulated agents written to
read the panels a harness renders: their numbers show what the harness machinery can change, not what
a real model would score."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnevo.envs.alfworld import engine_versions  # noqa: E402
from harnevo.envs.games import resolve_games  # noqa: E402
from harnevo.envs.pool import EnginePool  # noqa: E402
from harnevo.harness.genome import get, with_genes  # noqa: E402
from harnevo.harness.spec import load_harness  # noqa: E402
from harnevo.models import get_model  # noqa: E402
from harnevo.runtime.evaluate import evaluate  # noqa: E402


def _insert(blocks: list[str], block: str, *, before: str) -> list[str]:
    out = list(blocks)
    out.insert(out.index(before), block)
    return out


def ladder() -> list[tuple[str, str, object]]:
    h = load_harness("react")
    rows = [("react", "the seed", h)]

    def step(label: str, what: str, genes: dict) -> None:
        nonlocal h
        h = with_genes(h, {**genes}).evolve(name=f"ablation_{len(rows)}")
        rows.append((label, what, h))

    step("+ admissible actions shown", "turn block admissible, system block admissible_rule",
         {"prompt.turn": _insert(get(h, "prompt.turn"), "admissible", before="step_line"),
          "prompt.system": _insert(get(h, "prompt.system"), "admissible_rule", before="names_rule")})
    step("+ guard", "guard nearest_admissible, its note shown",
         {"guard": "nearest_admissible", "prompt.turn": _insert(get(h, "prompt.turn"), "guard_note", before="admissible")})
    step("+ longer history", "history_window 8 -> 30", {"memory.history_window": 30})
    step("+ Belief", "mode always_on, Belief panel", {"mode": "always_on", "memory.belief": True,
                                                       "prompt.turn": _insert(get(h, "prompt.turn"), "belief",
                                                                              before="observation")})
    step("+ Progress", "Progress panel", {"memory.progress": True,
                                          "prompt.turn": _insert(get(h, "prompt.turn"), "progress", before="observation")})
    step("+ Experience", "Experience panel and bank", {"memory.experience": True,
                                                       "prompt.turn": _insert(get(h, "prompt.turn"), "experience",
                                                                              before="observation")})
    rows.append(("bpe_always_on (seed, reference)", "history 3, workspace intro", load_harness("bpe_always_on")))
    return rows


async def main(args: argparse.Namespace) -> None:
    games, source = resolve_games(args.split, data=args.data, n=args.games, seed=args.seed)
    model = get_model(args.model)
    out = Path(args.out)
    results = []
    async with EnginePool(workers=args.workers, max_cached_games=max(32, len(games))) as pool:
        for label, what, h in ladder():
            t0 = time.perf_counter()
            r = await evaluate(h, model, games, pool, out=out / h.behaviour_id, concurrency=args.concurrency)
            s = r.summary
            results.append((label, what, s))
            print(f"  {label}: {100 * s['success_rate']:.1f}% in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    v = engine_versions()
    sim = " (simulated)" if model.simulated else ""
    print(f"\nmodel {model.name}{sim}; {len(games)} {games[0].split} games ({source}); alfworld {v.get('alfworld')}, "
          f"textworld {v.get('textworld')}; success: Wilson 95% interval over games\n")
    print("| harness | what changed | success [95% CI] | change | mean steps | tokens / episode | behaviour id |")
    print("|---|---|---:|---:|---:|---:|---|")
    prev = None
    for label, what, s in results:
        lo, hi = s["ci95"]
        delta = "" if prev is None or label.startswith("bpe_always_on") else f"{100 * (s['success_rate'] - prev):+.1f}"
        print(f"| {label} | {what} | {100 * s['success_rate']:.1f}% [{100 * lo:.0f}–{100 * hi:.0f}] | {delta} | "
              f"{s['mean_steps']:.1f} | {s['tokens_per_episode']:.0f} | `{s['behaviour_id']}` |")
        if not label.startswith("bpe_always_on"):
            prev = s["success_rate"]
    n_infra = sum(s["infra_errors"] for _, _, s in results)
    if n_infra:
        print(f"\n{n_infra} infrastructure error(s) were not counted; re-run to play them again")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="sim/bounded")
    p.add_argument("--split", default="valid_seen")
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--games", type=int, default=None, help="a seeded sample of N games (default all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", default="runs/ablation", help="results folders, one per harness (re-running resumes)")
    asyncio.run(main(p.parse_args()))
