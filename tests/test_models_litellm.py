"""litellm models against a real local OpenAI-compatible server: replies, faults, retries, cost, secrets."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest

from harnevo.errors import ModelCallError, ModelNotFoundError
from harnevo.models import RetryPolicy, get_model

try:
    from tests.fake_openai_server import TEST_API_KEY, FakeOpenAIServer, fake_openai  # noqa: F401
except ImportError:
    from fake_openai_server import TEST_API_KEY, FakeOpenAIServer, fake_openai  # noqa: F401

FAST = RetryPolicy(max_retries=6, base_delay_s=0.01, max_delay_s=0.05)
MSGS = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "You see a cabinet 1."}]


def model_for(srv: FakeOpenAIServer, **kw):
    kw.setdefault("retry", FAST)
    kw.setdefault("timeout_s", 1.0)
    return get_model("openai/test-model", api_base=srv.url, **kw)


def test_plain_call(fake_openai):
    fake_openai.reply = lambda messages: "Action: look" if "cabinet" in messages[-1]["content"] else "?"
    m = model_for(fake_openai)
    r = asyncio.run(m.complete(MSGS, temperature=0.0, max_tokens=32))
    assert r.text == "Action: look"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.retries == 0 and not r.cached and not m.simulated
    assert fake_openai.requests == 1
    body = fake_openai.bodies[0]
    assert body["model"] == "test-model" and body["max_tokens"] == 32 and body["temperature"] == 0.0
    assert body["messages"] == MSGS


@pytest.mark.parametrize("fault", ["429*3", "500", "502,503", "hang", "malformed", "empty"])
def test_each_fault_is_retried_and_counted(fake_openai, fault):
    fake_openai.hang_s = 3.0
    fake_openai.set_faults(fault)
    m = model_for(fake_openai, timeout_s=0.5)
    r = asyncio.run(m.complete(MSGS))
    n_faults = len(fake_openai.faults_served)
    assert n_faults == (3 if fault == "429*3" else 2 if "," in fault else 1)
    assert r.text and r.retries == n_faults == m.retries
    assert fake_openai.requests == n_faults + 1  # the SDK made no hidden retries


def test_permanent_failure_raises_model_call_error(fake_openai):
    fake_openai.set_faults("500*10")
    m = model_for(fake_openai, retry=RetryPolicy(max_retries=3, base_delay_s=0.0))
    with pytest.raises(ModelCallError) as err:
        asyncio.run(m.complete(MSGS))
    msg = str(err.value)
    assert "\n" not in msg and "server error (500)" in msg and "after 3 retries" in msg
    assert fake_openai.requests == 4 and m.failures == 1


def test_client_errors_are_not_retried(fake_openai):
    fake_openai.set_faults("401")
    m = model_for(fake_openai)
    with pytest.raises(ModelCallError, match="401"):
        asyncio.run(m.complete(MSGS))
    assert fake_openai.requests == 1


def test_retry_after_is_honoured(fake_openai):
    fake_openai.set_faults("429:1")
    m = model_for(fake_openai)
    t0 = time.monotonic()
    r = asyncio.run(m.complete(MSGS))
    assert r.retries == 1 and time.monotonic() - t0 >= 0.95


def test_in_flight_cap(fake_openai):
    fake_openai.latency_s = 0.1
    m = model_for(fake_openai, max_in_flight=2)

    async def many():
        return await asyncio.gather(*(m.complete(MSGS, temperature=0.5, sample=i) for i in range(6)))

    replies = asyncio.run(many())
    assert len(replies) == 6 and fake_openai.requests == 6
    assert fake_openai.max_active == 2


def test_price_per_million_tokens(fake_openai):
    m = model_for(fake_openai, price=(2.0, 10.0))
    r = asyncio.run(m.complete(MSGS))
    expected = (r.usage.prompt_tokens * 2.0 + r.usage.completion_tokens * 10.0) / 1e6
    assert r.usage.cost_usd == pytest.approx(expected) and r.usage.cost_usd > 0
    assert m.priced


def test_unknown_model_without_price_costs_zero_and_is_unpriced(fake_openai):
    m = model_for(fake_openai)
    r = asyncio.run(m.complete(MSGS))
    assert r.usage.cost_usd == 0.0 and m.priced is False


def test_known_model_priced_from_litellm_map(fake_openai):
    m = get_model("openai/gpt-4o-mini", api_base=fake_openai.url, retry=FAST)
    r = asyncio.run(m.complete(MSGS))
    assert m.priced and r.usage.cost_usd > 0


def test_key_never_in_errors_or_logs(monkeypatch, caplog, capfd):
    monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
    caplog.set_level(logging.DEBUG)
    lite = logging.getLogger("LiteLLM")
    # the server expects another key, and echoes the one it got in its 401 body
    with FakeOpenAIServer(api_key="sk-other-key-not-the-test-one") as srv:
        m = model_for(srv)
        old_level = lite.level
        lite.setLevel(logging.DEBUG)  # even litellm's debug lines pass the scrub filter
        try:
            with pytest.raises(ModelCallError) as err:
                asyncio.run(m.complete(MSGS))
            srv.set_faults("500*10")
            srv.api_key = TEST_API_KEY
            with pytest.raises(ModelCallError) as err2:
                asyncio.run(model_for(srv, retry=RetryPolicy(max_retries=1, base_delay_s=0)).complete(MSGS))
        finally:
            lite.setLevel(old_level)
    out, errs = capfd.readouterr()
    assert "Incorrect API key" in str(err.value)
    for text in (str(err.value), repr(err.value), str(err2.value), caplog.text, out, errs):
        assert TEST_API_KEY not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no provider traceback printed


def test_unknown_provider_prefix():
    with pytest.raises(ModelNotFoundError, match="unknown model provider 'nosuchprovider'"):
        get_model("nosuchprovider/some-model")
    with pytest.raises(ModelNotFoundError):
        get_model("qwen-unheard-of-model")
    with pytest.raises(ModelNotFoundError):
        get_model("")
    # providers litellm routes are accepted without a call
    for spec in ("hosted_vllm/Qwen/Qwen3-8B", "ollama/qwen3:8b", "anthropic/claude-opus-4-5"):
        assert get_model(spec).name == spec


def test_sim_dispatches_to_make_sim(monkeypatch):
    import types

    fake = types.ModuleType("harnevo.models.sim")
    fake.make_sim = lambda spec: ("sim-model", spec)
    monkeypatch.setitem(sys.modules, "harnevo.models.sim", fake)
    assert get_model("sim/oracle") == ("sim-model", "sim/oracle")


def test_package_import_does_not_import_litellm():
    code = "import sys, harnevo.models; assert 'litellm' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
