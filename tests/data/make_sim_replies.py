"""Writes tests/data/sim_replies.json.xz: real turn messages and what the simulated agents reply to them.

The messages come from real episodes (the three seed harnesses x sim/bounded, two sim settings, through
harnevo's evaluator and engine pool) on official games, plus multi-turn chats assembled from those
turns. For each message list it records the reply of several `sim/...` specs and samples.

The checked-in file was written by the single-module sim (harnevo/models/sim.py at commit f113d2d,
before it was split into the harnevo/models/sim/ package); tests/test_sim.py checks that the sim still
gives exactly these replies. Re-running this script after a deliberate change of the sim's behaviour
rewrites the reference:

    python tests/data/make_sim_replies.py /path/to/alfworld   # the folder that holds json_2.1.1
"""

from __future__ import annotations

import asyncio
import json
import lzma
import random
import shutil
import sys
import tempfile
from pathlib import Path

from harnevo.envs.games import FAMILIES, scan_split
from harnevo.envs.pool import EnginePool
from harnevo.harness.spec import load_harness
from harnevo.models import get_model
from harnevo.models.sim import make_sim, prompt_tokens
from harnevo.models.base import approx_tokens
from harnevo.runtime.evaluate import evaluate

OUT = Path(__file__).resolve().parent / "sim_replies.json.xz"
SEEDS = ("react", "bpe_always_on", "bpe_inline")
PLAY_SPECS = ("sim/bounded", "sim/bounded?lapse=0.3&forget_per_1k=1&seed=5")
REPLY_SPECS = (
    ("sim/bounded", 0), ("sim/bounded", 1),
    ("sim/bounded?lapse=0&per_1k_tokens=0&forget_per_1k=0&knowledge=1", 0),
    ("sim/bounded?lapse=0.5&forget_per_1k=2&knowledge=0&seed=7", 3),
    ("sim/latency?ms=0&seed=2", 0),
    ("sim/random?seed=3", 0),
)
PER_TRAJECTORY = 6  # turns kept from each trajectory (first, last and a seeded sample between)
CHATS = 40


def _games(root: Path) -> list:
    seen, unseen = scan_split(root, "valid_seen"), scan_split(root, "valid_unseen")
    out = [next(g for g in seen if g.family == f) for f in FAMILIES]
    for f in FAMILIES:
        out += [g for g in unseen if g.family == f][:2]
    return out


async def _play(root: Path, tmp: Path) -> list[dict]:
    trajs = []
    async with EnginePool(workers=2) as pool:
        for seed in SEEDS:
            for i, spec in enumerate(PLAY_SPECS):
                r = await evaluate(load_harness(seed), get_model(spec), _games(root), pool,
                                   out=tmp / f"{seed}-{i}", concurrency=6)
                trajs += [t.to_dict() for t in sorted(r.trajectories, key=lambda t: t.key)]
    return trajs


def _cases(trajs: list[dict]) -> list[list[dict]]:
    rng = random.Random(0)
    cases: list[list[dict]] = []
    for t in trajs:
        turns = t["turns"]
        idx = sorted({0, len(turns) - 1} | set(rng.sample(range(len(turns)), min(PER_TRAJECTORY - 2, len(turns)))))
        cases += [turns[i]["messages"] for i in idx]
    # multi-turn chats: system, first user message, then (assistant reply, next user message) pairs
    for t in rng.sample([t for t in trajs if len(t["turns"]) >= 3], CHATS):
        turns = t["turns"]
        k = rng.randrange(2, min(len(turns), 12) + 1)
        chat = list(turns[0]["messages"])
        for j in range(1, k):
            chat += [{"role": "assistant", "content": turns[j - 1]["reply"]},
                     {"role": "user", "content": turns[j]["messages"][-1]["content"]}]
        cases.append(chat)
    return cases


def main(root: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sim-replies-"))
    try:
        trajs = asyncio.run(_play(root, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    records = []
    for messages in _cases(trajs):
        replies = []
        for spec, sample in REPLY_SPECS:
            d = make_sim(spec).decide(messages, sample)
            replies.append({"spec": spec, "sample": sample, "text": d.text, "action": d.action,
                            "planned": d.planned, "lapsed": d.lapsed, "p_lapse": d.p_lapse,
                            "completion_tokens": approx_tokens(d.text)})
        records.append({"messages": messages, "prompt_tokens": prompt_tokens(messages), "replies": replies})
    blob = json.dumps({"schema": 1, "records": records}, ensure_ascii=False, sort_keys=True).encode()
    OUT.write_bytes(lzma.compress(blob, preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(records)} message lists, {len(blob)} bytes of JSON, {OUT.stat().st_size} bytes in {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/alfworld"))
