"""Model-layer figures: reply-cache replay speed, and the per-call overhead of the litellm path.

    python bench/bench_models.py [--calls 200] [--replay 5000]

Starts the local fake OpenAI server (tests/fake_openai_server.py) on 127.0.0.1 and prints:
  - raw HTTP: latency per request with a plain keep-alive http.client POST (the floor);
  - litellm path: latency per call through get_model('openai/...').complete, sequential, and
    throughput with 8 calls in flight; the difference to raw HTTP is litellm's overhead;
  - cache replay: replies per second served by CachedModel from the SQLite cache, for ALFWorld-sized
    prompts (a new ReplyCache opened on the file, so it reads from disk, not from a dict).
Nothing here is a test; it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fake_openai_server import TEST_API_KEY, FakeOpenAIServer  # noqa: E402

from harnevo.models import Reply, ReplyCache, Usage, get_model  # noqa: E402
from harnevo.models.cache import CachedModel, cache_key  # noqa: E402


def alfworld_messages(i: int, turns: int = 8) -> list[dict]:
    """A prompt the size of a mid-episode ALFWorld ReAct prompt (~4k characters)."""
    obs = "You arrive at cabinet 3. On the cabinet 3, you see a mug 1, a plate 2, and a knife 1. " * 3
    msgs = [{"role": "system", "content": "You are an agent in a household. Reply with Think: ... then Action: ..." * 4}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"[{i}:{t}] {obs}"})
        msgs.append({"role": "assistant", "content": f"Think: look further.\nAction: go to cabinet {t}"})
    msgs.append({"role": "user", "content": f"[{i}] Your task is to: put a clean mug in coffeemachine."})
    return msgs


def bench_raw(srv: FakeOpenAIServer, n: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port)
    headers = {"Authorization": f"Bearer {TEST_API_KEY}", "Content-Type": "application/json"}
    times = []
    for i in range(n):
        body = json.dumps({"model": "test-model", "messages": alfworld_messages(i), "temperature": 0, "max_tokens": 64}).encode()
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        resp = conn.getresponse()
        json.loads(resp.read())
        times.append(time.perf_counter() - t0)
    conn.close()
    return statistics.median(times)


async def bench_litellm(srv: FakeOpenAIServer, n: int) -> tuple[float, float]:
    m = get_model("openai/test-model", api_base=srv.url)
    await m.complete(alfworld_messages(-1))  # warm: client creation, first-call setup
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        await m.complete(alfworld_messages(i), max_tokens=64)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    await asyncio.gather(*(m.complete(alfworld_messages(n + i), max_tokens=64) for i in range(n)))
    throughput = n / (time.perf_counter() - t0)
    return statistics.median(times), throughput


class _Nothing:
    name = "openai/test-model"
    simulated = False

    async def complete(self, *a, **k):
        raise AssertionError("replay must not call the model")

    async def aclose(self):
        pass


async def bench_replay(path: Path, n: int) -> float:
    with ReplyCache(path) as cache:  # fill
        for i in range(n):
            key = cache_key("openai/test-model", alfworld_messages(i), 0.0, 64, 0)
            cache.put(key, "openai/test-model", Reply(f"Think: ok\nAction: go to cabinet {i}", Usage(1000, 12, 0.001)))
    msgs = [alfworld_messages(i) for i in range(n)]
    with ReplyCache(path) as cache:
        m = CachedModel(_Nothing(), cache)
        t0 = time.perf_counter()
        for mm in msgs:
            r = await m.complete(mm, max_tokens=64)
            assert r.cached
        dt = time.perf_counter() - t0
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200, help="calls per HTTP measurement")
    ap.add_argument("--replay", type=int, default=5000, help="cached replies to replay")
    args = ap.parse_args()
    os.environ["OPENAI_API_KEY"] = TEST_API_KEY
    with FakeOpenAIServer() as srv:
        raw = bench_raw(srv, args.calls)
        t0 = time.perf_counter()
        get_model("openai/test-model", api_base=srv.url)
        import_s = time.perf_counter() - t0
        lit, thr = asyncio.run(bench_litellm(srv, args.calls))
    with tempfile.TemporaryDirectory() as tmp:
        rps = asyncio.run(bench_replay(Path(tmp) / "cache.sqlite", args.replay))
    print(f"raw HTTP (http.client, keep-alive)   median {raw * 1e3:7.2f} ms/request")
    print(f"litellm path (sequential)            median {lit * 1e3:7.2f} ms/call  (overhead {(lit - raw) * 1e3:.2f} ms/call)")
    print(f"litellm path ({args.calls} concurrent, cap 8)  {thr:7.1f} calls/s")
    print(f"litellm import + first get_model      {import_s:7.2f} s (once per process)")
    print(f"cache replay (SQLite, ~4k-char prompts)  {rps:7.0f} replies/s over {args.replay} replies")


if __name__ == "__main__":
    main()
