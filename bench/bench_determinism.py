"""Results do not depend on timing, on a whole split: `apply` at concurrency 1, at concurrency 16, and a run
SIGKILLed twice and resumed give the same per-game outcomes and the same experience.json.

    python bench/bench_determinism.py --data ../shared/alfworld --split valid_seen --harness bpe_always_on

Prints, for each run, its wall time, success and whether its per-game outcomes (status, success, steps,
the bank snapshot read, every action) and its experience.json equal those of the concurrency-1 run."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def outcomes(out: Path) -> dict[str, tuple]:
    rows = {}
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        t = json.loads(line)
        rows[t["game"]] = (t["status"], t["success"], t["steps"], t["bank_seen"],
                           tuple(tu["executed"] or tu["meta"] or tu["invalid"] or "" for tu in t["turns"]))
    return rows


def apply_cmd(args, out: Path, concurrency: int) -> list[str]:
    cmd = [sys.executable, "-m", "harnevo.cli", "apply", args.harness, "--model", args.model, "--split", args.split,
           "--out", str(out), "--concurrency", str(concurrency)]
    if args.data:
        cmd += ["--data", str(args.data)]
    if args.games:
        cmd += ["--games", str(args.games)]
    if args.no_step_cache:
        cmd += ["--no-step-cache"]
    return cmd


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--harness", default="bpe_always_on")
    p.add_argument("--model", default="sim/bounded")
    p.add_argument("--split", default="valid_seen")
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--games", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("runs/determinism"))
    p.add_argument("--no-step-cache", action="store_true", help="every step on the engine (no answers from the cache)")
    args = p.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {}
    for name, conc in (("c1", 1), ("c16", 16)):
        out = args.out / name
        t0 = time.perf_counter()
        subprocess.run(apply_cmd(args, out, conc), check=True, env=env, stdout=subprocess.DEVNULL)
        runs[name] = (out, time.perf_counter() - t0)
    out = args.out / "killed"
    traj = out / "trajectories.jsonl"
    total = len(outcomes(runs["c1"][0]))
    t0 = time.perf_counter()
    kills = []
    for frac in (0.25, 0.6):
        proc = subprocess.Popen(apply_cmd(args, out, 16), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        while proc.poll() is None:
            if traj.is_file() and len(traj.read_bytes().splitlines()) >= frac * total:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills.append(len([l for l in traj.read_bytes().splitlines() if l.endswith(b"}")]))
    subprocess.run(apply_cmd(args, out, 16), check=True, env=env, stdout=subprocess.DEVNULL)
    runs["killed twice"] = (out, time.perf_counter() - t0)
    ref_out = runs["c1"][0]
    ref, ref_bank = outcomes(ref_out), (ref_out / "experience.json").read_text()
    cache = "no step cache" if args.no_step_cache else "step cache on"
    print(f"{args.harness} x {args.model} on {total} {args.split} games ({cache}); killed with SIGKILL after "
          f"{kills} episodes")
    print("| run | wall s | success | per-game outcomes = c1 | experience.json = c1 |")
    print("|---|---:|---:|---|---|")
    for name, (o, wall) in runs.items():
        s = json.loads((o / "summary.json").read_text())
        same = outcomes(o) == ref
        bank_same = (o / "experience.json").read_text() == ref_bank
        print(f"| {name} | {wall:.0f} | {100 * s['success_rate']:.1f}% ({s['successes']}/{s['games']}) | "
              f"{'yes' if same else 'NO'} | {'yes' if bank_same else 'NO'} |")


if __name__ == "__main__":
    main()
