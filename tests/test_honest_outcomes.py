"""Honest outcomes through litellm against a real local HTTP server: an outage is an infra_error that is
played again and never counted; cost is the list price, cached or not; spend and budget continue across
invocations; a truncated reply is told from a malformed one; a cache tag keeps served models apart."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

try:
    from tests.fake_openai_server import TEST_API_KEY, FakeOpenAIServer
except ImportError:
    from fake_openai_server import TEST_API_KEY, FakeOpenAIServer

from harnevo.models.retry import RetryPolicy
from harnevo.models.sim import make_sim
from harnevo.runtime.apply import ApplyOptions, run_apply

_AGENT = make_sim("sim/bounded?lapse=0")


def scripted(messages):
    return asyncio.run(_AGENT.complete(messages)).text


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    # short retry delays: an outage is reached in seconds, not minutes
    monkeypatch.setattr("harnevo.models.factory.RetryPolicy",
                        lambda max_retries=6: RetryPolicy(max_retries=2, base_delay_s=0.01))
    with FakeOpenAIServer(reply=scripted) as srv:
        yield srv


def _opts(alfworld_data, srv, out: Path, **kw) -> ApplyOptions:
    base = dict(harness="react", model="openai/test-model", api_base=srv.url, split="valid_seen", games=3, seed=7,
                data=alfworld_data, out=out, concurrency=1, workers=2, max_steps=12, timeout_s=5.0,
                cache=out.parent / "replies.sqlite")
    return ApplyOptions(**{**base, **kw})


def _trajs(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "trajectories.jsonl").read_text().splitlines() if l.strip()]


def test_an_outage_is_infra_error_replayed_and_never_counted(alfworld_data, server, tmp_path):
    out = tmp_path / "run"
    server.set_faults("500*3")  # the first episode's first call fails 1 + 2 retries: unreachable
    first = run_apply(_opts(alfworld_data, server, out))
    lines = _trajs(out)
    hit = [t for t in lines if t["status"] == "infra_error"]
    assert len(hit) == 1 and hit[0]["reason"].startswith("model call failed") and not hit[0]["success"]
    ok = [t for t in lines if t["status"] == "ok"]
    assert first["infra_errors"] == 1 and first["games"] == 2 == len(ok)
    assert first["success_rate"] == sum(t["success"] for t in ok) / 2  # the outage is not a failure
    assert first["complete"] is False
    # the server is healthy again: the re-run plays exactly the episode the outage hit, nothing else
    again = run_apply(_opts(alfworld_data, server, out))
    replayed = _trajs(out)[len(lines):]
    assert [t["key"] for t in replayed] == [hit[0]["key"]] and replayed[0]["status"] == "ok"
    assert again["episodes_played_now"] == 1 and again["infra_errors"] == 0 and again["games"] == 3
    assert again["complete"] is True


def test_list_price_on_cached_turns_and_spend_across_invocations(alfworld_data, server, tmp_path):
    price = (100.0, 100.0)  # USD per million tokens
    a = run_apply(_opts(alfworld_data, server, tmp_path / "a", price=price, games=2))
    paid = server.requests
    assert a["cost_usd"] > 0 and a["spent_usd"] == pytest.approx(a["cost_usd"])
    # the same games into another folder: all from the cache; the cost objective sees the same list price
    b = run_apply(_opts(alfworld_data, server, tmp_path / "b", price=price, games=2))
    assert server.requests == paid and b["cache_hits"] > 0
    assert b["cost_usd"] == pytest.approx(a["cost_usd"]) and b["spent_usd"] == 0
    assert all(tu["cached"] and tu["cost_usd"] > 0 and tu["spent_usd"] == 0 for t in _trajs(tmp_path / "b")
               for tu in t["turns"])
    # the budget continues across invocations into one folder: spend is kept in budget.json
    out = tmp_path / "budget"
    limit = a["cost_usd"] * 0.75  # less than two episodes cost
    s1 = run_apply(_opts(alfworld_data, server, out, price=price, games=1, budget_usd=limit, cache=None))
    spent1 = json.loads((out / "budget.json").read_text())["spent_usd"]
    assert spent1 > 0 and spent1 == pytest.approx(s1["spent_usd"])
    s2 = run_apply(_opts(alfworld_data, server, out, price=price, games=2, budget_usd=limit, cache=None))
    assert s2["budget"]["invocations"] == 2 and s2["budget"]["spent_usd"] >= spent1
    assert s2["stopped_by_budget"] is True and s2["episodes"] < 2


def test_a_truncated_reply_is_not_a_malformed_one(alfworld_data, server, tmp_path):
    server.reply = lambda messages: "Think: " + "let me consider every receptacle carefully " * 20 + "\nAction: look"
    s = run_apply(_opts(alfworld_data, server, tmp_path / "t", games=1, max_steps=2, max_tokens=16, cache=None))
    (t,) = _trajs(tmp_path / "t")
    assert s["invalid_replies_per_episode"] == 2
    assert all(tu["finish_reason"] == "length" and tu["invalid"].startswith("truncated at max_tokens")
               for tu in t["turns"])


def test_cache_tag_keeps_served_models_apart(alfworld_data, server, tmp_path):
    run_apply(_opts(alfworld_data, server, tmp_path / "v1", games=1, cache_tag="ckpt-v1"))
    n = server.requests
    run_apply(_opts(alfworld_data, server, tmp_path / "v1again", games=1, cache_tag="ckpt-v1"))
    assert server.requests == n  # same tag: served from the cache
    run_apply(_opts(alfworld_data, server, tmp_path / "v2", games=1, cache_tag="ckpt-v2"))
    assert server.requests > n  # a retrained model under the same name never gets v1's replies
