"""Evolution, measured: wall time, episodes, episodes/s, store overhead; the front on held-out games; racing
against no racing; evolution against random search with the same episode budget; and a run from `react`
alone with a weaker simulated agent.

    python bench/bench_evolve.py --data ../shared/alfworld            # population 16 x 10 generations, 48 games
    python bench/bench_evolve.py --data ../shared/alfworld --mutation-steps 1    # one mutation per mutant
    python bench/bench_evolve.py --data ../shared/alfworld --population 8 --generations 4 --games 24 --held-out-games 60

Runs (each in its own folder under --out, resumable):
  A  seeds react,bpe_always_on,bpe_inline x --model, racing on
  B  the same with --no-racing
  C  --search random with A's episode budget
  D  seeds react alone x --weak-model (a weaker simulated agent), racing on
  E  --search random from react alone x --weak-model with D's episode budget (where success does not saturate)
  F  D with `init: random` (generation 0 drawn as E draws it) and E's episode budget
  G  F with --no-racing, for the generations F completed: with E, the racing / no-racing / random trio on the
     weaker agent, where success does not saturate (on --model every search's best wins every held-out game)
Then every front member of A and the seeds are played on the held-out split (frozen banks learned on the
train games), and the best harness of A, B, C, D against their seeds. Every number names the model, the
games, n and its CI; sim/... models are simulated agents written to read the panels a harness renders."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnevo.envs.games import resolve_games  # noqa: E402
from harnevo.envs.pool import EnginePool  # noqa: E402
from harnevo.evolve.config import parse_config  # noqa: E402
from harnevo.evolve.operators import changed_genes  # noqa: E402
from harnevo.evolve.refs import learned_bank  # noqa: E402
from harnevo.evolve.run import run_evolve  # noqa: E402
from harnevo.harness.genome import normalize  # noqa: E402
from harnevo.harness.spec import load_harness  # noqa: E402
from harnevo.models import get_model  # noqa: E402
from harnevo.population.store import Store  # noqa: E402
from harnevo.runtime.evaluate import evaluate  # noqa: E402

WEAK = "sim/bounded?lapse=0.4&knowledge=0&forget_per_1k=2"  # react: 45% [31-60] on 40 valid_seen games
FOLDERS = {"A": "A_racing", "B": "B_no_racing", "C": "C_random", "D": "D_react_weak", "E": "E_random_weak",
           "F": "F_react_weak_init_random", "G": "G_react_weak_no_racing"}  # each run's folder under --out


def evolve(run: str, args, **overrides) -> dict:
    cfg = parse_config({"model": args.model, "seeds": "react,bpe_always_on,bpe_inline", "split": args.split,
                        "games": args.games, "data": str(args.data) if args.data else None,
                        "population": args.population, "generations": args.generations, "seed": args.seed,
                        "concurrency": args.concurrency, "max_steps": args.max_steps,
                        "mutation_steps": args.mutation_steps, **overrides})
    t0 = time.perf_counter()
    summary = run_evolve(cfg, args.out / FOLDERS[run])
    summary["bench_wall"] = time.perf_counter() - t0
    return summary


async def held_out(run_dirs: dict[str, Path], members: dict[str, list[str]], args, model_name: str,
                   variants: dict[str, tuple[str, str, dict]] | None = None) -> dict:
    """Success of each (run, behaviour id) on the held-out split, banks frozen; `variants` adds one-gene
    ablations: label -> (run, behaviour id, fields changed with Harness.evolve), under results[(run, label)]."""
    games, source = resolve_games(args.held_out, data=args.data, n=args.held_out_games, seed=args.seed)
    model = get_model(model_name)
    out = {}
    folder = args.out / "held_out" / model_name.replace("/", "_").replace("?", "_")
    async with EnginePool(max_cached_games=max(32, len(games))) as pool:
        for run, ids in members.items():
            store = Store.open(run_dirs[run])
            try:
                plays = [(bid, bid, {}) for bid in ids] + [(label, bid, fields) for label, (vrun, bid, fields)
                                                           in (variants or {}).items() if vrun == run]
                for key, bid, fields in plays:
                    h = store.harness(bid)
                    bank = learned_bank(store, h)
                    played = normalize(h.evolve(**fields)) if fields else h
                    r = await evaluate(played, model, games, pool, out=folder / (bid if key == bid else f"{bid}-{key}"),
                                       concurrency=args.concurrency, bank=bank, freeze_bank=bank is not None)
                    out[(run, key)] = r.summary
            finally:
                store.close()
    return {"games": len(games), "source": source, "results": out}


def fmt(s: dict) -> str:
    lo, hi = s["ci95"]
    return f"{100 * s['success_rate']:.1f}% [{100 * lo:.0f}–{100 * hi:.0f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--model", default="sim/bounded")
    p.add_argument("--weak-model", default=WEAK)
    p.add_argument("--split", default="valid_train")
    p.add_argument("--held-out", default="valid_unseen")
    p.add_argument("--held-out-games", type=int, default=None, help="a seeded sample (default: the whole split)")
    p.add_argument("--games", type=int, default=48)
    p.add_argument("--population", type=int, default=16)
    p.add_argument("--generations", type=int, default=10)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--mutation-steps", type=int, default=2,
                   help="mutations chained into each mutant, every run (README: 2 beat 1 on run A, not on D)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_evolve"))
    p.add_argument("--skip", default="", help="runs to skip, e.g. B,C,D")
    args = p.parse_args()
    skip = set(args.skip.split(",")) - {""}

    runs: dict[str, dict] = {}
    if "A" not in skip:
        runs["A"] = evolve("A", args)
    if "B" not in skip:
        runs["B"] = evolve("B", args, racing=False)
    if "C" not in skip and "A" in runs:
        runs["C"] = evolve("C", args, search="random", generations=None,
                           episodes=runs["A"]["episodes_in_store"])
    if "D" not in skip:
        runs["D"] = evolve("D", args, seeds="react", model=args.weak_model)
    if "E" not in skip and "D" in runs:
        runs["E"] = evolve("E", args, seeds="react", model=args.weak_model, search="random",
                           generations=None, episodes=runs["D"]["episodes_in_store"])
    if "F" not in skip and "D" in runs:
        runs["F"] = evolve("F", args, seeds="react", model=args.weak_model, init="random",
                           generations=None, episodes=runs["D"]["episodes_in_store"])
    if "G" not in skip and "F" in runs:
        runs["G"] = evolve("G", args, seeds="react", model=args.weak_model, init="random",
                           racing=False, generations=runs["F"]["generations"])

    print(f"\n## Evolution runs ({args.games} {args.split} games, population {args.population}, seed {args.seed})\n")
    print("| run | model | search | wall s | episodes played | episodes/s | saved by racing | store ms / episode "
          "| store share of episode time | best (train) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    labels = {"A": "evolve, racing", "B": "evolve, no racing", "C": "random search (A's episodes)",
              "D": "evolve from react, racing", "E": "random search from react (D's episodes)",
              "F": "evolve from react, init random, racing (E's episodes)",
              "G": "evolve from react, init random, no racing (F's generations)"}
    for k, s in runs.items():
        best = next(r for r in s["front"] if r["behaviour_id"] == s["best"])
        share = s["store_seconds_per_episode"] / max(1e-9, s["episode_seconds_mean"])
        if s["episodes_played_now"] == 0:  # a finished run, only resumed here: its figures are in its own log
            print(f"| {k} | {s['model']} | {labels[k]} (finished earlier, resumed: see its log) | - | "
                  f"{s['episodes_in_store']} in the store | - | {s['episodes_saved_by_racing']} | - | - | `{s['best']}` |")
            continue
        print(f"| {k} | {s['model']} | {labels[k]} | {s['wall_seconds']:.0f} | {s['episodes_played_now']} | "
              f"{s['episodes_played_now'] / max(1e-9, s['wall_seconds']):.2f} | {s['episodes_saved_by_racing']} | "
              f"{1000 * s['store_seconds_per_episode']:.2f} | {100 * share:.2f}% | `{s['best']}` "
              f"{100 * best['success']:.1f}% over {best['games']} |")

    seeds = {h: normalize(load_harness(h)).behaviour_id for h in ("react", "bpe_always_on", "bpe_inline")}
    run_dirs = {k: args.out / folder for k, folder in FOLDERS.items()}
    if "A" in runs:
        held_out_strong(runs, seeds, run_dirs, args)
    if "D" in runs:
        held_out_weak(runs, seeds, run_dirs, args)
    if {"E", "F", "G"} <= set(runs):
        weak_trio(runs, run_dirs, args)
    (args.out / "bench_evolve.json").write_text(json.dumps({k: v for k, v in runs.items()}, indent=1, default=str))


def held_out_strong(runs: dict, seeds: dict, run_dirs: dict, args) -> None:
    """A's front and the seeds (and B's and C's bests) on the held-out split with args.model."""
    members = {"A": list(dict.fromkeys([r["behaviour_id"] for r in runs["A"]["front"]] + list(seeds.values())))}
    for k in ("B", "C"):
        if k in runs:
            members[k] = [runs[k]["best"]]
    ho = asyncio.run(held_out(run_dirs, members, args, args.model))
    print(f"\n## Held-out: {ho['games']} {args.held_out} games ({ho['source']}), model {args.model} (simulated), "
          f"banks learned on the train games and frozen; Wilson 95% CI over games\n")
    print("| run | harness | success [CI] | tokens / episode | meta / episode |")
    print("|---|---|---:|---:|---:|")
    names = {v: k for k, v in seeds.items()}
    for (run, bid), s in ho["results"].items():
        tag = names.get(bid, "front" if run == "A" and bid != runs["A"]["best"] else "best")
        if run == "A" and bid == runs["A"]["best"]:
            tag = "best"
        print(f"| {run} | `{bid}` ({tag}) | {fmt(s)} | {s['tokens_per_episode']:.0f} | "
              f"{s['meta_actions_per_episode']:.2f} |")
    seed_rows = [ho["results"][("A", b)] for b in seeds.values()]
    best_seed = max(seed_rows, key=lambda s: s["success_rate"])
    lo_seed = best_seed["ci95"][0]
    print(f"\nbest seed on held-out: {best_seed['harness_name']} {fmt(best_seed)}, "
          f"{best_seed['tokens_per_episode']:.0f} tokens/episode. Front members of A against it (success at least "
          f"the seed's within the CIs, read two ways: strict = the member's upper bound reaches the seed's rate; "
          f"overlap = the member's upper bound reaches the seed's lower bound):")
    for (run, b), s in ho["results"].items():
        if run != "A" or b in names:
            continue
        ratio = s["tokens_per_episode"] / best_seed["tokens_per_episode"]
        strict, overlap = s["ci95"][1] >= best_seed["success_rate"], s["ci95"][1] >= lo_seed
        print(f"- `{b}` {fmt(s)}, {100 * ratio:.0f}% of the seed's tokens: strict {'yes' if strict else 'no'}, "
              f"overlap {'yes' if overlap else 'no'}; at most 60% of its tokens: {'yes' if ratio <= 0.6 else 'no'}")


def held_out_weak(runs: dict, seeds: dict, run_dirs: dict, args) -> None:
    """react, D's best and E's best on the held-out split with the weaker agent."""
    react_id = seeds["react"]
    weak = {"D": [react_id, runs["D"]["best"]], **({"E": [runs["E"]["best"]]} if "E" in runs else {})}
    store = Store.open(run_dirs["D"])
    seed_h, best_h = store.harness(react_id), store.harness(runs["D"]["best"])
    genes = changed_genes(seed_h, best_h)
    store.close()
    # one-gene ablation: a longer step budget wins games by itself; give the best the seed's budget back
    variants = {} if best_h.budget.max_steps == seed_h.budget.max_steps else \
        {"seed_budget": ("D", runs["D"]["best"], {"budget": {"max_steps": seed_h.budget.max_steps}})}
    hd = asyncio.run(held_out(run_dirs, weak, args, args.weak_model, variants))
    r, b = hd["results"][("D", react_id)], hd["results"][("D", runs["D"]["best"])]
    half = (r["ci95"][1] - r["ci95"][0]) / 2 + (b["ci95"][1] - b["ci95"][0]) / 2
    print(f"\n## From react alone, weaker agent {args.weak_model} (simulated), {hd['games']} {args.held_out} games\n")
    print(f"react {fmt(r)}; evolved best `{runs['D']['best']}` {fmt(b)}; difference "
          f"{100 * (b['success_rate'] - r['success_rate']):+.1f} points (sum of the CI half-widths "
          f"{100 * half:.1f})")
    if variants:
        v = hd["results"][("D", "seed_budget")]
        print(f"the evolved best with react's step budget ({seed_h.budget.max_steps} instead of "
              f"{best_h.budget.max_steps}; nothing else changed) {fmt(v)}, {100 * (v['success_rate'] - r['success_rate']):+.1f} "
              f"points over react")
    if "E" in runs:
        e = hd["results"][("E", runs["E"]["best"])]
        lower = e["ci95"][1] < b["ci95"][0]
        print(f"random search's best with the same episodes `{runs['E']['best']}` {fmt(e)}, "
              f"{e['tokens_per_episode']:.0f} tokens/episode (evolved best: {b['tokens_per_episode']:.0f}); "
              f"{'lower than the evolved best, the intervals apart' if lower else 'intervals overlap the evolved best'}")
    print("genes it changed: " + "; ".join(f"{g}: {v[0]!r} -> {v[1]!r}" for g, v in genes.items()))


def weak_trio(runs: dict, run_dirs: dict, args) -> None:
    """Racing (F), no racing (G) and random search (E) side by side on the held-out split, weaker agent."""
    trio = {"F": "evolve, racing", "G": "evolve, no racing", "E": "random search, F's episode budget"}
    ho = asyncio.run(held_out(run_dirs, {k: [runs[k]["best"]] for k in trio}, args, args.weak_model))
    print(f"\n## Racing, no racing, random search: from react, init random, weaker agent {args.weak_model} "
          f"(simulated), {ho['games']} {args.held_out} games, banks frozen; Wilson 95% CI over games\n")
    print("| run | search | episodes in the store | saved by racing | best | success [CI] | tokens / episode |")
    print("|---|---|---:|---:|---|---:|---:|")
    res = {k: ho["results"][(k, runs[k]["best"])] for k in trio}
    for k, label in trio.items():
        s = res[k]
        print(f"| {k} | {label} | {runs[k]['episodes_in_store']} | {runs[k]['episodes_saved_by_racing']} | "
              f"`{runs[k]['best']}` | {fmt(s)} | {s['tokens_per_episode']:.0f} |")
    ratio = runs["G"]["episodes_in_store"] / max(1, runs["F"]["episodes_in_store"])
    gap = 100 * (res["G"]["success_rate"] - res["F"]["success_rate"])
    e, f = res["E"], res["F"]
    print(f"\nno racing played {ratio:.2f}x racing's episodes (at least 1.8x: {'yes' if ratio >= 1.8 else 'no'}); "
          f"its best {gap:+.1f} points from racing's (within 5: {'yes' if abs(gap) <= 5 else 'no'}); random search's "
          f"best {100 * (e['success_rate'] - f['success_rate']):+.1f} points from racing's (lower: "
          f"{'yes' if e['success_rate'] < f['success_rate'] else 'no'}; "
          f"{'intervals apart' if e['ci95'][1] < f['ci95'][0] else 'intervals overlap'})")


if __name__ == "__main__":
    main()
