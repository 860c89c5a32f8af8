"""Benchmark of harnevo's game generator: time to generate N engine-checked games, the discard rate,
and the comparison of the generated games with the official valid_seen games.

    python bench/bench_generate.py                       # 120 games, seed 1, 2 workers
    python bench/bench_generate.py --games 24 --workers 2 --out /tmp/gen24

Prints the report and a markdown table, and writes the table with the command that produced it to
bench/generate_stats.md (--md to change, --no-md to skip).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harnevo.envs import gamestats  # noqa: E402
from harnevo.envs.alfworld import engine_versions  # noqa: E402
from harnevo.envs.generate import generate, split_dir  # noqa: E402


def default_data() -> Path:
    """$ALFWORLD_DATA when it holds valid_seen, else the workplace's shared copy."""
    env = os.environ.get("ALFWORLD_DATA")
    if env and (Path(env) / "json_2.1.1" / "valid_seen").is_dir():
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "alfworld"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="output folder (default: a temporary one, removed after)")
    ap.add_argument("--data", default=None, help="folder holding json_2.1.1/valid_seen (official games)")
    ap.add_argument("--md", default=str(Path(__file__).resolve().parent / "generate_stats.md"))
    ap.add_argument("--no-md", action="store_true")
    args = ap.parse_args()

    tmp = None
    out = args.out
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="harnevo-gen-")
        out = tmp.name
    last = [0.0]

    def progress(p: dict) -> None:
        if p["done"] == p["total"] or time.monotonic() - last[0] > 15:
            last[0] = time.monotonic()
            print(f"  {p['done']}/{p['total']} games, {p['discarded']} discarded, {p['elapsed_s']} s", flush=True)

    t0 = time.monotonic()
    cpu0 = os.times()
    report = generate(out, args.games, seed=args.seed, workers=args.workers, progress=progress, overwrite=True)
    wall = time.monotonic() - t0
    cpu1 = os.times()
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system) \
        + (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    load = os.getloadavg()[0]

    print(json.dumps(report.to_dict(), indent=2))
    print(f"\n{report.games} games in {wall:.0f} s wall ({cpu:.0f} s CPU, {args.workers} workers, "
          f"{os.cpu_count()} cores, load average {load:.1f} at the end); discard rate {report.discard_rate:.1%} "
          f"({report.n_discarded} draws discarded: {report.discards or 'none'})")

    official_dir = Path(args.data or default_data()) / "json_2.1.1" / "valid_seen"
    gen = gamestats.split_stats(split_dir(out, "generated"))
    if not official_dir.is_dir():
        print(f"(no official games at {official_dir}: no comparison)")
        return
    off = gamestats.split_stats(official_dir)
    rows = gamestats.compare(gen, off)
    table = gamestats.markdown_table(rows, n_generated=len(gen), n_official=len(off))
    print("\n" + table)
    worst = max(abs(r.ratio - 1) for r in rows if r.ratio is not None)
    print(f"\nlargest deviation from the official median: {worst:.0%}")

    if not args.no_md:
        versions = engine_versions()
        cmd = "python bench/bench_generate.py" + ("" if (args.games, args.seed, args.workers) == (120, 1, 2) else
                                                   f" --games {args.games} --seed {args.seed} --workers {args.workers}")
        md = "\n".join([
            "### Generated games vs the official ones",
            "",
            f"`{cmd}` generated {report.games} games (seed {args.seed}, {report.games // max(1, len(report.families))}"
            f" per task family) in {wall:.0f} s on a {os.cpu_count()}-core machine ({args.workers} worker processes, "
            f"{cpu:.0f} s CPU in all; load average {load:.1f} at the end, other processes included); "
            f"{report.n_discarded} draws were discarded on the way "
            f"(discard rate {report.discard_rate:.1%}: "
            + (", ".join(f"{k} {v}" for k, v in report.discards.items()) or "none") + "). "
            f"ALFWorld's handcoded expert won {report.solvers.get('handcoded', 0)} of them, the PDDL planner expert "
            f"the other {report.solvers.get('planner', 0)}. Medians per game, generated vs the official "
            f"`valid_seen` split (alfworld {versions['alfworld']}, textworld {versions['textworld']}):",
            "",
            table,
            "",
            "Solution length is the stored walkthrough: the PDDL planner's plan for the official games, the "
            "shortest engine-checked winning list for the generated ones. The generated games are synthetic "
            "(placed by harnevo from ALFWorld's scene layouts, not recorded in AI2-THOR).",
            "",
        ])
        Path(args.md).write_text(md)
        print(f"\nwrote {args.md}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
