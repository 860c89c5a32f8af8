"""A `Model` over litellm: any provider litellm routes, plus the local `hf/` provider.

Each call: at most `max_in_flight` requests of this model at once (an asyncio semaphore per event
loop), a per-call timeout, retries with backoff on transient faults (retry.py), token usage from the
response and dollars from the user's price or litellm's price map. After the last retry it raises
`ModelCallError` with one scrubbed line.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import weakref
from typing import Any

from harnevo.errors import ModelCallError
from harnevo.models import _litellm
from harnevo.models.base import Message, Reply, Usage, approx_tokens
from harnevo.models.cost import Price
from harnevo.models.retry import BadResponse, RetryPolicy, classify
from harnevo.models.secrets import one_line


class LiteLLMModel:
    """`name` is the user's --model string; `litellm_model` what litellm is given (default: `name`)."""

    simulated = False

    def __init__(
        self,
        name: str,
        *,
        litellm_model: str | None = None,
        api_base: str | None = None,
        timeout_s: float | None = 60.0,
        retry: RetryPolicy | None = None,
        max_in_flight: int = 8,
        price: Price | tuple[float, float] | None = None,
        cache_name: str | None = None,
        rng: random.Random | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.name = name
        self.litellm_model = litellm_model or name
        self.cache_name = cache_name or name  # identity for the reply cache
        self.api_base = api_base
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.max_in_flight = max_in_flight
        self.price = Price.of(price)
        self.extra = dict(extra or {})
        self._rng = rng or random.Random()
        self._sems: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" = weakref.WeakKeyDictionary()
        self._litellm = _litellm.load()
        self.priced = self.price is not None or self._in_price_map()
        # counters over this model's life
        self.calls = 0
        self.retries = 0
        self.failures = 0
        self.usage = Usage()

    def __repr__(self) -> str:
        return f"LiteLLMModel({self.name!r}, priced={self.priced})"

    def _in_price_map(self) -> bool:
        try:
            info = self._litellm.get_model_info(self.litellm_model)
        except Exception:  # litellm raises several kinds for "not mapped"
            return False
        return info.get("input_cost_per_token") is not None or info.get("output_cost_per_token") is not None

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(loop)
        if sem is None:
            sem = self._sems[loop] = asyncio.Semaphore(self.max_in_flight)
        return sem

    def in_flight(self) -> int:
        """Requests of this model running now on the current loop."""
        sem = self._sems.get(asyncio.get_running_loop())
        return 0 if sem is None else self.max_in_flight - sem._value  # noqa: SLF001 (no public accessor)

    async def complete(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        sample: int = 0,
    ) -> Reply:
        kwargs: dict[str, Any] = {
            "model": self.litellm_model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": temperature,
            "max_tokens": max_tokens,
            "max_retries": 0,  # the provider SDK must not retry behind our back: we count retries
            "drop_params": True,  # e.g. models that refuse temperature=0
            **self.extra,
        }
        if temperature > 0:  # reproducible sampling where the provider supports it (OpenAI, vLLM, hf/)
            kwargs["seed"] = sample
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.timeout_s is not None:
            kwargs["timeout"] = self.timeout_s
        guard = None if self.timeout_s is None else self.timeout_s * 1.5 + 5.0
        self.calls += 1
        attempt = 0
        while True:
            t0 = time.monotonic()
            try:
                async with self._semaphore():
                    call = self._litellm.acompletion(**kwargs)
                    resp = await (asyncio.wait_for(call, guard) if guard else call)
                text, usage, extras = self._parse(resp, messages)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # classified below; anything not transient fails the call
                verdict = classify(exc)
                if not verdict.retryable or attempt >= self.retry.max_retries:
                    self.failures += 1
                    detail = "" if isinstance(exc, BadResponse) else _detail(exc)
                    tries = f" after {attempt} retries" if attempt else ""
                    raise ModelCallError(one_line(f"{self.name}: {verdict.reason}{tries}{detail}")) from None
                await asyncio.sleep(self.retry.delay(attempt, verdict.retry_after, self._rng))
                attempt += 1
                self.retries += 1
                continue
            self.usage += usage
            return Reply(text=text, usage=usage, latency_s=time.monotonic() - t0, retries=attempt, **extras)

    def _parse(self, resp: Any, messages: list[Message]) -> tuple[str, Usage, dict[str, Any]]:
        choices = getattr(resp, "choices", None)
        if not choices:
            raise BadResponse("no choices")
        message = getattr(choices[0], "message", None)
        if message is None:
            raise BadResponse("no message")
        text = getattr(message, "content", None) or ""
        u = getattr(resp, "usage", None)
        pt = getattr(u, "prompt_tokens", None)
        ct = getattr(u, "completion_tokens", None)
        if pt is None:
            pt = approx_tokens("".join(m["content"] for m in messages))
        if ct is None:
            ct = approx_tokens(text)
        extras = {"finish_reason": getattr(choices[0], "finish_reason", None) or None,
                  "logprobs": _token_logprobs(getattr(choices[0], "logprobs", None))}
        return text, Usage(int(pt), int(ct), self._cost(resp, int(pt), int(ct))), extras

    def _cost(self, resp: Any, pt: int, ct: int) -> float:
        if self.price is not None:
            return self.price.cost(pt, ct)
        if not self.priced:
            return 0.0
        try:
            return float(self._litellm.completion_cost(completion_response=resp, model=self.litellm_model))
        except Exception:  # priced at construction but this response could not be costed
            try:
                p, c = self._litellm.cost_per_token(model=self.litellm_model, prompt_tokens=pt, completion_tokens=ct)
                return float(p + c)
            except Exception:
                return 0.0

    async def aclose(self) -> None:
        """Nothing to release per model: litellm's HTTP clients are shared by the process."""
        return None


def _token_logprobs(lp: Any) -> list[float] | None:
    """One log-probability per completion token from an OpenAI-style `logprobs` ({content: [{logprob}]})."""
    content = lp.get("content") if isinstance(lp, dict) else getattr(lp, "content", None)
    if not content:
        return None
    out = []
    for tok in content:
        value = tok.get("logprob") if isinstance(tok, dict) else getattr(tok, "logprob", None)
        if value is None:
            return None
        out.append(float(value))
    return out


_PREFIXES = re.compile(r"^(?:\s*(?:litellm\.)?\w*(?:Error|Exception|Timeout)\s*(?::|-)\s*)+")


def _detail(exc: BaseException) -> str:
    """The provider's message without litellm's repeated class-name prefixes ('' when empty)."""
    text = _PREFIXES.sub("", str(exc)).strip()
    return f": {text}" if text else ""
