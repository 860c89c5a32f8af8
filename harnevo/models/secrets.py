"""Keep API keys out of every message we produce.

Keys reach litellm only through the environment. Anything we turn into text (an error message, a log
line) passes through `scrub`, which removes the values of secret-looking environment variables and
anything shaped like a key or a bearer token.
"""

from __future__ import annotations

import logging
import os
import re

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
_PATTERNS = [
    re.compile(r"(?i)\bbearer\s+[^\s\"',;]+"),
    re.compile(r"\b(sk|pk|rk|hf|gsk|xai|key)[-_][A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\b(api[_-]?key|x-api-key|authorization|access[_-]?token)(\"?\s*[:=]\s*\"?)[^\s\"',;}]+"),
]
REDACTED = "[REDACTED]"


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret (long enough to be a key)."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= 8}
    return sorted(vals, key=len, reverse=True)


def scrub(text: str, extra: tuple[str, ...] = ()) -> str:
    """`text` with secret values and key-shaped substrings replaced by [REDACTED]."""
    for value in (*extra, *secret_values()):
        if value and len(value) >= 4:
            text = text.replace(value, REDACTED)
    text = _PATTERNS[0].sub("Bearer " + REDACTED, text)
    text = _PATTERNS[1].sub(REDACTED, text)
    text = _PATTERNS[2].sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return text


def one_line(text: str, limit: int = 300) -> str:
    """Scrubbed, whitespace-collapsed, at most `limit` characters."""
    flat = " ".join(scrub(str(text)).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ScrubFilter(logging.Filter):
    """A logging filter that scrubs secrets from every record it passes (message and args folded)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record: drop its args rather than fail the caller
            msg = str(record.msg)
        record.msg, record.args = scrub(msg), None
        return True
