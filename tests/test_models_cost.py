"""Prices, budgets, retry policy and secret scrubbing: pure logic, no network, no litellm."""

from __future__ import annotations

import random

import pytest

from harnevo.models import Budget, Price, Reply, RetryPolicy, Usage, spend_of
from harnevo.models.retry import BadResponse, classify, retry_after_s
from harnevo.models.secrets import scrub


def test_price_per_million():
    p = Price.of((2.5, 10.0))
    assert p.cost(1_000_000, 0) == pytest.approx(2.5)
    assert p.cost(1000, 500) == pytest.approx(0.0025 + 0.005)
    assert Price.of(None) is None
    with pytest.raises(ValueError):
        Price(-1, 0)


def test_budget_usd_stops_before_passing():
    b = Budget(usd=1.0)
    est = Usage(cost_usd=0.3)
    started = []
    for i in range(10):
        if b.would_exceed(est):
            break
        started.append(b.reserve(est))
    assert len(started) == 3 and b.exhausted  # 0.9 in flight; a fourth would pass 1.0
    for r in started:
        b.settle(r, Usage(100, 10, 0.25))
    snap = b.snapshot()
    assert snap["spent_usd"] == pytest.approx(0.75) and snap["in_flight_usd"] == 0 and snap["exhausted"]
    assert b.estimate() == Usage(100, 10, pytest.approx(0.25))
    assert not b.would_exceed(Usage(cost_usd=0.25))  # exactly reaching the limit is allowed
    assert b.would_exceed(Usage(cost_usd=0.26))


def test_budget_tokens_and_at_limit():
    b = Budget(tokens=100)
    r = b.reserve(Usage(40, 10))
    assert not b.would_exceed(Usage(40, 10))
    assert b.would_exceed(Usage(40, 11))
    b.settle(r, Usage(90, 10))
    assert b.would_exceed()  # spent == limit: nothing more, even with an unknown estimate
    with pytest.raises(ValueError):
        b.settle(r, Usage())


def test_budget_unlimited_and_release():
    b = Budget()
    assert not b.limited and not b.would_exceed(Usage(10**9, 10**9, 1e9))
    b = Budget(usd=0.0)
    assert b.would_exceed()  # a zero budget affords nothing
    b = Budget(usd=1.0)
    r = b.reserve(Usage(cost_usd=0.9))
    b.release(r)
    assert b.in_flight == Usage() and b.estimate() is None


def test_spend_of_cached_reply_is_zero():
    hit = Reply("x", Usage(10, 5, 0.0), cached=True)
    miss = Reply("x", Usage(10, 5, 0.01))
    assert spend_of(hit) == Usage() and spend_of(miss) == Usage(10, 5, 0.01)


def test_backoff_grows_with_jitter_and_honours_retry_after():
    pol = RetryPolicy(max_retries=6, base_delay_s=1.0, max_delay_s=8.0)
    rng = random.Random(0)
    for attempt, cap in [(0, 1), (1, 2), (2, 4), (3, 8), (5, 8)]:
        d = pol.delay(attempt, None, rng)
        assert cap / 2 <= d <= cap
    assert pol.delay(0, 30.0, rng) == 30.0
    assert RetryPolicy(max_retry_after_s=5).delay(0, 300.0, rng) == 5.0
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


class _Err(Exception):
    def __init__(self, status, headers=None):
        super().__init__(f"status {status}")
        self.status_code = status
        self.litellm_response_headers = headers or {}


def test_classify():
    v = classify(_Err(429, {"Retry-After": "3"}))
    assert v.retryable and v.retry_after == 3.0
    assert retry_after_s(_Err(429, {"retry-after-ms": "250"})) == 0.25
    assert classify(_Err(503)).retryable and classify(_Err(500)).retryable
    assert not classify(_Err(401)).retryable and not classify(_Err(400)).retryable
    assert classify(TimeoutError()).retryable and classify(BadResponse("no choices")).retryable
    assert not classify(KeyError("x")).retryable


def test_scrub(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_API_KEY", "abcd1234efgh5678")
    text = "key abcd1234efgh5678; Authorization: Bearer tok_0123456789; sk-proj-ABCDEFGH12345678 api_key=zzzzzzzzzz"
    out = scrub(text)
    for secret in ("abcd1234efgh5678", "tok_0123456789", "sk-proj-ABCDEFGH12345678", "zzzzzzzzzz"):
        assert secret not in out
    assert scrub("rate limited (429)") == "rate limited (429)"
