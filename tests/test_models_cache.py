"""The reply cache: zero requests on replay, distinct samples, hits cost nothing, concurrent writers."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3

import pytest

from harnevo.errors import ModelCallError
from harnevo.models import CachedModel, Reply, ReplyCache, RetryPolicy, Usage, get_model, spend_of
from harnevo.models.cache import cache_key

try:
    from tests.fake_openai_server import TEST_API_KEY, FakeOpenAIServer, fake_openai  # noqa: F401
except ImportError:
    from fake_openai_server import TEST_API_KEY, FakeOpenAIServer, fake_openai  # noqa: F401

FAST = RetryPolicy(max_retries=3, base_delay_s=0.01)
MSGS = [{"role": "user", "content": "You are in the middle of a room."}]


def counting_reply():
    n = {"i": 0}

    def reply(messages):
        n["i"] += 1
        return f"Action: go to cabinet {n['i']}"

    return reply


def test_key_is_canonical_and_ignores_sample_at_temperature_zero():
    a = cache_key("m", [{"role": "user", "content": "x"}], 0.0, 10, 0)
    b = cache_key("m", [{"content": "x", "role": "user"}], 0, 10, 7)
    assert a == b and len(a) == 64
    assert cache_key("m", MSGS, 0.7, 10, 0) != cache_key("m", MSGS, 0.7, 10, 1)
    assert cache_key("m", MSGS, 0.0, 10, 0) != cache_key("m", MSGS, 0.0, 11, 0)
    assert cache_key("m", MSGS, 0.0, 10, 0) != cache_key("m2", MSGS, 0.0, 10, 0)


def test_second_identical_call_at_temperature_zero_makes_no_request(fake_openai, tmp_path):
    fake_openai.reply = counting_reply()
    path = tmp_path / "cache.sqlite"
    with ReplyCache(path) as cache:
        m = get_model("openai/test-model", api_base=fake_openai.url, cache=cache, retry=FAST, price=(1.0, 1.0))
        first = asyncio.run(m.complete(MSGS))
        second = asyncio.run(m.complete(MSGS))
        assert fake_openai.requests == 1
        assert not first.cached and second.cached
        assert second.text == first.text
        # a hit costs nothing now (spend_of), but keeps the original tokens and list price: a cost
        # objective sees the same cost whether or not the prompt happened to be cached
        assert second.usage.cost_usd == first.usage.cost_usd > 0
        assert second.finish_reason == first.finish_reason == "stop"
        assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (first.usage.prompt_tokens, first.usage.completion_tokens)
        assert spend_of(second) == Usage() and spend_of(first) == first.usage
        assert cache.stats() == {"hits": 1, "misses": 1, "writes": 1, "saved_usd": pytest.approx(first.usage.cost_usd)}
    # a re-run: a new process would open the file afresh; a new server port is the same model
    fake_openai.reset_counters()
    with ReplyCache(path) as cache, FakeOpenAIServer(reply=counting_reply()) as other:
        m = get_model("openai/test-model", api_base=other.url, cache=cache, retry=FAST)
        again = asyncio.run(m.complete(MSGS))
        assert again.cached and again.text == first.text and other.requests == 0


def test_samples_are_distinct_and_reproduced(fake_openai, tmp_path):
    fake_openai.reply = counting_reply()
    path = tmp_path / "cache.sqlite"
    with ReplyCache(path) as cache:
        m = get_model("openai/test-model", api_base=fake_openai.url, cache=cache, retry=FAST)
        s0 = asyncio.run(m.complete(MSGS, temperature=0.8, sample=0))
        s1 = asyncio.run(m.complete(MSGS, temperature=0.8, sample=1))
        assert s0.text != s1.text and fake_openai.requests == 2 and len(cache) == 2
    with ReplyCache(path) as cache:
        m = get_model("openai/test-model", api_base=fake_openai.url, cache=cache, retry=FAST)
        r1 = asyncio.run(m.complete(MSGS, temperature=0.8, sample=1))
        r0 = asyncio.run(m.complete(MSGS, temperature=0.8, sample=0))
        assert (r0.text, r1.text) == (s0.text, s1.text) and r0.cached and r1.cached
        assert fake_openai.requests == 2


def test_errors_are_not_cached_and_key_not_stored(fake_openai, tmp_path):
    fake_openai.set_faults("500*2")
    path = tmp_path / "cache.sqlite"
    with ReplyCache(path) as cache:
        m = get_model("openai/test-model", api_base=fake_openai.url, cache=cache, retry=RetryPolicy(max_retries=1, base_delay_s=0))
        with pytest.raises(ModelCallError):
            asyncio.run(m.complete(MSGS))
        assert len(cache) == 0
        assert asyncio.run(m.complete(MSGS)).text
        assert len(cache) == 1
    for f in tmp_path.iterdir():  # the db and any WAL/SHM files
        assert TEST_API_KEY.encode() not in f.read_bytes()


class _Echo:
    """A minimal Model (stands in for sim/...): counts calls."""

    name = "echo"
    simulated = True

    def __init__(self, delay: float = 0.0):
        self.calls = 0
        self.delay = delay

    async def complete(self, messages, *, temperature=0.0, max_tokens=256, sample=0):
        self.calls += 1
        await asyncio.sleep(self.delay)
        return Reply(text=f"echo {messages[-1]['content']} {sample}", usage=Usage(3, 2, 0.0))

    async def aclose(self):
        pass


def test_wraps_any_model_and_shares_concurrent_identical_calls(tmp_path):
    inner = _Echo(delay=0.05)
    with ReplyCache(tmp_path / "c.sqlite") as cache:
        m = CachedModel(inner, cache)
        assert m.simulated and m.name == "echo"

        async def run():
            return await asyncio.gather(*(m.complete(MSGS) for _ in range(5)))

        replies = asyncio.run(run())
        assert inner.calls == 1
        assert [r.cached for r in replies].count(False) == 1
        assert len({r.text for r in replies}) == 1


def _writer(path: str, worker: int, n: int, barrier) -> None:
    cache = ReplyCache(path)
    barrier.wait(30)  # both processes write at the same time
    for i in range(n):
        key = cache_key("m", [{"role": "user", "content": f"q{i}"}], 0.0, 16, 0)
        if cache.get(key) is None:
            cache.put(key, "m", Reply(text=f"a{i}", usage=Usage(i, 1, 0.0)))
        # also some keys only this worker writes
        own = cache_key("m", [{"role": "user", "content": f"w{worker}-{i}"}], 0.0, 16, 0)
        cache.put(own, "m", Reply(text=f"w{worker}-{i}", usage=Usage(1, 1, 0.0)))
    cache.close()


def test_two_processes_write_one_file(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ReplyCache(path).close()
    ctx = multiprocessing.get_context("spawn")
    n = 400
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(path, w, n, barrier)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 3 * n
    con.close()
    with ReplyCache(path) as cache:
        for i in (0, n // 2, n - 1):
            r = cache.lookup("m", [{"role": "user", "content": f"q{i}"}], temperature=0.0, max_tokens=16)
            assert r is not None and r.text == f"a{i}" and r.cached and r.usage.prompt_tokens == i
