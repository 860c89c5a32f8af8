"""A persistent reply cache: one SQLite file, safe for several processes writing at once.

Key: sha256 of the canonical JSON of (model cache name, messages, temperature, max_tokens, sample),
where sample is the caller's sample index when temperature > 0 and 0 otherwise. So at temperature 0
a replay makes no call; at temperature > 0 repeated samples stay distinct and a re-run with the same
sample indices gets the same replies back. The server address (api_base) is not part of the key unless
the model's cache name says so: `get_model(..., cache_tag=...)` appends a served-model fingerprint
(`--cache-tag v2`, or `--cache-tag api_base`), so a retrained model served under the same name never
gets the old model's replies.

Cost of a hit: the returned Reply has `cached=True` and the original usage, list price included
(`usage.cost_usd`), so a cost objective sees the same cost whether or not a prompt happened to be cached;
what a hit costs *now* is `cost.spend_of(reply)`, zero. The original dollar cost of every hit is summed
in `ReplyCache.saved_usd`.

What is stored: the key, the model cache name, the reply text, token counts, the original cost, the
finish reason and a timestamp. Never an API key, never a request header.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from harnevo.models.base import Message, Reply, Usage

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    created REAL NOT NULL,
    finish_reason TEXT
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def cache_key(model: str, messages: list[Message], temperature: float, max_tokens: int, sample: int) -> str:
    payload = {
        "v": SCHEMA_VERSION,
        "model": model,
        "messages": [dict(m) for m in messages],
        "temperature": float(temperature),
        "max_tokens": int(max_tokens),
        "sample": int(sample) if temperature > 0 else 0,
    }
    canon = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedEntry:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    finish_reason: str | None = None

    def reply(self, latency_s: float = 0.0) -> Reply:
        """The Reply a hit serves: original usage and list price, marked cached (nothing paid now)."""
        return Reply(self.text, Usage(self.prompt_tokens, self.completion_tokens, self.cost_usd), latency_s,
                     cached=True, finish_reason=self.finish_reason)


class ReplyCache:
    """Thread-safe in one process; several processes may share the file (WAL, busy timeout).
    A forked child reopens its own connection."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.saved_usd = 0.0  # the original cost of the replies served from the cache
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        cols = {row[1] for row in conn.execute("PRAGMA table_info(replies)")}
        if "finish_reason" not in cols:  # a cache written before finish reasons were kept
            with suppress(sqlite3.OperationalError):  # another process added it first
                conn.execute("ALTER TABLE replies ADD COLUMN finish_reason TEXT")
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        self._conn, self._pid = conn, os.getpid()
        return conn

    key = staticmethod(cache_key)

    def get(self, key: str) -> CachedEntry | None:
        with self._lock:
            row = self._connect().execute(
                "SELECT text, prompt_tokens, completion_tokens, cost_usd, finish_reason FROM replies WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
            self.saved_usd += row[3]
            return CachedEntry(*row)

    def put(self, key: str, model: str, reply: Reply) -> None:
        """Store a reply (the first writer of a key wins; a cached reply is never re-stored)."""
        if reply.cached:
            return
        u = reply.usage
        with self._lock:
            cur = self._connect().execute(
                "INSERT OR IGNORE INTO replies (key, model, text, prompt_tokens, completion_tokens, cost_usd, "
                "created, finish_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, model, reply.text, u.prompt_tokens, u.completion_tokens, u.cost_usd, time.time(),
                 reply.finish_reason),
            )
            self.writes += cur.rowcount if cur.rowcount > 0 else 0

    def lookup(self, model: str, messages: list[Message], *, temperature: float, max_tokens: int, sample: int = 0) -> Reply | None:
        """A cached Reply (cached=True, original tokens and list price) or None."""
        entry = self.get(cache_key(model, messages, temperature, max_tokens, sample))
        return None if entry is None else entry.reply()

    def store(self, model: str, messages: list[Message], reply: Reply, *, temperature: float, max_tokens: int, sample: int = 0) -> None:
        self.put(cache_key(model, messages, temperature, max_tokens, sample), model, reply)

    def __len__(self) -> int:
        with self._lock:
            return self._connect().execute("SELECT COUNT(*) FROM replies").fetchone()[0]

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes, "saved_usd": self.saved_usd}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "ReplyCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CachedModel:
    """Wraps any Model: looks a call up before making it, stores what it made.

    Identical calls running at the same time in one process share one request (the others get the
    reply marked cached: they made no request and cost nothing). Errors are never cached.
    """

    def __init__(self, inner, cache: ReplyCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.simulated = inner.simulated
        self.cache_name = getattr(inner, "cache_name", inner.name)
        self._pending: dict[str, asyncio.Future] = {}

    def __getattr__(self, attr: str):  # priced, usage, retries... of the wrapped model
        if attr == "inner":  # not yet set (copy/unpickle): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    async def complete(self, messages: list[Message], *, temperature: float = 0.0, max_tokens: int = 256, sample: int = 0) -> Reply:
        t0 = time.monotonic()
        key = cache_key(self.cache_name, messages, temperature, max_tokens, sample)
        entry = self.cache.get(key)
        if entry is not None:
            return entry.reply(time.monotonic() - t0)
        pending = self._pending.get(key)
        if pending is not None:
            await asyncio.wait([pending])  # not cancelled by our own cancellation's effect on it
            if not pending.cancelled():
                reply = pending.result()  # re-raises the owner's ModelCallError
                return Reply(reply.text, Usage(reply.usage.prompt_tokens, reply.usage.completion_tokens,
                                               reply.usage.cost_usd), time.monotonic() - t0, cached=True,
                             finish_reason=reply.finish_reason, token_ids=reply.token_ids, logprobs=reply.logprobs)
            return await self.complete(messages, temperature=temperature, max_tokens=max_tokens, sample=sample)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        try:
            reply = await self.inner.complete(messages, temperature=temperature, max_tokens=max_tokens, sample=sample)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            self._pending.pop(key, None)
        self.cache.put(key, self.cache_name, reply)
        fut.set_result(reply)
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()
