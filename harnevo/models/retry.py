"""Which failed calls to retry, and how long to wait: exponential backoff with jitter, Retry-After honoured.

Pure logic over exception attributes (`status_code`, response headers); no litellm import, so it is
testable on its own.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass

RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx


class BadResponse(Exception):
    """A 200 reply we cannot use (no choices, no message): retried like a server fault."""


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` retries after the first try; wait min(max_delay_s, base_delay_s * 2**attempt),
    jittered to between half and all of it. A server's Retry-After replaces the computed wait when it
    is longer (capped at `max_retry_after_s`)."""

    max_retries: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must be >= 0")

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        cap = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        wait = cap / 2 + rng.uniform(0, cap / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_retry_after_s))
        return wait


@dataclass(frozen=True)
class Verdict:
    retryable: bool
    reason: str  # short, e.g. "rate limited (429)"; never the provider's message body
    retry_after: float | None = None


def status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    if isinstance(code, int):
        return code
    resp = getattr(exc, "response", None)
    code = getattr(resp, "status_code", None)
    return code if isinstance(code, int) else None


def _headers(exc: BaseException) -> dict[str, str]:
    for source in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None), getattr(exc, "headers", None)):
        if source:
            try:
                return {str(k).lower(): str(v) for k, v in dict(source).items()}
            except (TypeError, ValueError):
                continue
    return {}


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if the server sent one."""
    h = _headers(exc)
    if "retry-after-ms" in h:
        try:
            return max(0.0, float(h["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = h.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def classify(exc: BaseException) -> Verdict:
    """Decide whether a failed call is worth retrying, with a short reason."""
    name = type(exc).__name__
    if isinstance(exc, BadResponse):
        return Verdict(True, f"unusable response ({exc})")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or name in {"Timeout", "APITimeoutError", "ReadTimeout", "ConnectTimeout"}:
        return Verdict(True, "timed out")
    status = status_of(exc)
    if status == 429:
        return Verdict(True, "rate limited (429)", retry_after_s(exc))
    if status is not None and (status >= 500 or status in RETRY_STATUS):
        return Verdict(True, f"server error ({status})", retry_after_s(exc))
    if name in {"APIConnectionError", "ServiceUnavailableError", "InternalServerError", "BadGatewayError", "APIResponseValidationError"} or isinstance(exc, (ConnectionError, json.JSONDecodeError)):
        return Verdict(True, f"connection or response error ({name})")
    if status is not None:
        return Verdict(False, f"{name} ({status})")
    return Verdict(False, name)
