"""The step cache: what the engine answered, by (game, action history), kept in SQLite across runs.

TextWorld's PDDL engine and ALFWorld's wrappers make no random choice of their own (the handcoded
expert's is seeded, see `harnevo.envs.worker`; tests/test_engine.py replays a game under two hash
seeds), so an observation is a function of the game's content, the engine's versions and the actions
played. Evaluating many harnesses on the same games replays the same prefixes again and again; this
cache answers them without the engine.

Keys. A *game key* (`game_key`) is a SHA-256 over the bytes of what the engine reads for the game
(`game.tw-pddl`; with the handcoded expert also the `traj_data.json` beside it), the alfworld and
textworld versions, `ENGINE_CODE_VERSION` and the expert setting: never a path, size or mtime. States
form a trie: the root node is a hash of the game key, the node after an action a hash of (parent node,
action); each entry holds the observation seen on arriving at that node.

Entries are engine answers only: the full observation (compressed canonical JSON, so it can be served)
and its digest, checked again on every read (a row that fails the check is deleted and counts as a
miss). The pool (`harnevo.envs.pool`) replaces an entry the engine contradicts (`replace`).

The file is SQLite in WAL mode, shared safely by several processes (writes are batched into short
`BEGIN IMMEDIATE` transactions, readers never block). A file that is not a database or is damaged never
stops a run: one warning line, the file is started over; if that fails too, the cache lives in memory
for the rest of the process. The oldest entries are dropped at open beyond `max_entries`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
import zlib
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any

from harnevo.envs.alfworld import ENGINE_CODE_VERSION
from harnevo.envs.wire import one_line
from harnevo.files import cache_root

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_MAX_ENTRIES = 500_000  # a few hundred bytes each on disk
MEMORY = ":memory:"
_FLUSH_ROWS = 256  # pending writes that trigger a flush
_FLUSH_SECONDS = 2.0  # or this long since the last one (checked when an episode closes)
_MAX_PENDING = 50_000  # writes kept while the file is locked by others; beyond, they are dropped
_MAX_RESTARTS = 3  # starts-over in one process before falling back to memory


def default_path() -> Path:
    """Where the step cache lives by default: beside the reply cache, in harnevo's cache folder."""
    return cache_root() / "steps.sqlite"


@lru_cache(maxsize=1)
def _engine_stamp() -> bytes:
    from importlib.metadata import PackageNotFoundError, version

    stamp: dict[str, Any] = {"harnevo_engine": ENGINE_CODE_VERSION}
    for dist in ("alfworld", "textworld"):
        try:
            stamp[dist] = version(dist)
        except PackageNotFoundError:
            stamp[dist] = None
    return json.dumps(stamp, sort_keys=True).encode()


def game_key(game_file: str, *, expert: str | None = None) -> str:
    """The content key of a game as the engine plays it (see the module docstring). Raises OSError
    when the game file cannot be read."""
    h = hashlib.sha256(b"harnevo-game-key\0" + _engine_stamp() + b"\0expert=" + (expert or "none").encode() + b"\0")
    parts = [game_file]
    if expert == "handcoded":  # ALFWorld's handcoded expert reads the task from traj_data.json
        parts.append(os.path.join(os.path.dirname(game_file), "traj_data.json"))
    for i, part in enumerate(parts):
        try:
            with open(part, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if i == 0:
                raise
            data = b"\0missing"  # the reset will fail on it; still a distinct key
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def root_node(key: str) -> bytes:
    return hashlib.blake2b(b"root\0" + key.encode(), digest_size=16).digest()


def child_node(node: bytes, action: str) -> bytes:
    return hashlib.blake2b(node + b"\0" + action.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _canonical(obs: dict[str, Any]) -> bytes:
    return json.dumps(obs, sort_keys=True).encode()  # what wire.obs_digest hashes


def _transient(exc: sqlite3.Error) -> bool:
    """Another process holds the write lock: skip this time, nothing is wrong with the file."""
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


class StepCache:
    """See the module docstring. `path` is a file, or ':memory:' for a cache that lives only in this
    process. Use from one thread (the pool's event loop)."""

    def __init__(self, path: str | os.PathLike, *, max_entries: int = DEFAULT_MAX_ENTRIES):
        self.path: Path | None = None if str(path) == MEMORY else Path(path)
        self.max_entries = max(1, int(max_entries))
        self.stats = {"bad_rows": 0, "restarts": 0, "dropped_writes": 0, "pruned": 0}
        self._pending: dict[bytes, tuple[bytes | None, str, dict[str, Any], str]] = {}
        self._last_flush = time.monotonic()
        self._db: sqlite3.Connection | None = None
        self._open()

    @property
    def persistent(self) -> bool:
        """Whether entries reach a file (False for ':memory:' and after falling back to memory)."""
        return self.path is not None

    # ------------------------------------------------------------------ file handling
    def _connect(self) -> sqlite3.Connection:
        if self.path is None:
            db = sqlite3.connect(MEMORY, isolation_level=None)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=10.0, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN IMMEDIATE")
            db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if row is not None and row[0] != str(SCHEMA_VERSION):
                db.execute("DROP TABLE IF EXISTS steps")  # another layout: its entries cannot be read
            db.execute("CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, node BLOB NOT NULL UNIQUE, "
                       "parent BLOB, action TEXT NOT NULL, obs BLOB NOT NULL, digest TEXT NOT NULL)")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            db.execute("COMMIT")
            self._prune(db)
        except BaseException:
            db.close()
            raise
        return db

    def _prune(self, db: sqlite3.Connection) -> None:
        lo, hi = db.execute("SELECT min(id), max(id) FROM steps").fetchone()
        if lo is None or hi - lo + 1 <= self.max_entries:
            return
        n = db.execute("SELECT count(*) FROM steps").fetchone()[0]
        if n <= self.max_entries:
            return
        keep = int(self.max_entries * 0.9)
        cutoff = db.execute("SELECT id FROM steps ORDER BY id DESC LIMIT 1 OFFSET ?", (keep,)).fetchone()[0]
        db.execute("BEGIN IMMEDIATE")
        cur = db.execute("DELETE FROM steps WHERE id <= ?", (cutoff,))
        db.execute("COMMIT")
        self.stats["pruned"] += cur.rowcount

    def _open(self) -> None:
        try:
            self._db = self._connect()
            return
        except (sqlite3.OperationalError, OSError) as exc:  # busy, or a place we cannot write: leave it be
            log.warning(f"step cache {self.path} cannot be used ({one_line(exc)}); it lives in memory for this run")
            self._to_memory()
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            self._start_over(exc)

    def _start_over(self, exc: BaseException) -> None:
        """The file is damaged (or unusable): one warning line, then a fresh file (or memory)."""
        self.stats["restarts"] += 1
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        if self.path is None or self.stats["restarts"] > _MAX_RESTARTS:
            log.warning(f"step cache failed ({one_line(exc)}); it lives in memory for the rest of this run")
            self._to_memory()
            return
        log.warning(f"step cache {self.path} is damaged ({one_line(exc)}); starting it over")
        try:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            self._db = self._connect()
        except (sqlite3.Error, OSError) as again:
            log.warning(f"step cache {self.path} cannot be started over ({one_line(again)}); it lives in memory "
                        f"for the rest of this run")
            self._to_memory()

    def _to_memory(self) -> None:
        self.path = None
        self._db = self._connect()

    def _failed(self, exc: sqlite3.Error) -> None:
        if not _transient(exc):
            self._start_over(exc)

    # ------------------------------------------------------------------ entries
    def get(self, node: bytes) -> tuple[dict[str, Any], str] | None:
        """(observation, digest) at `node`, or None. Do not mutate the observation."""
        pending = self._pending.get(node)
        if pending is not None:
            return pending[2], pending[3]
        if self._db is None:
            return None
        try:
            row = self._db.execute("SELECT obs, digest FROM steps WHERE node = ?", (node,)).fetchone()
        except sqlite3.Error as exc:
            self._failed(exc)
            return None
        if row is None:
            return None
        try:
            raw = zlib.decompress(row[0])
            if hashlib.sha1(raw).hexdigest() != row[1]:
                raise ValueError("digest mismatch")
            obs = json.loads(raw)
            if not isinstance(obs, dict) or not isinstance(obs.get("text"), str):
                raise ValueError("not an observation")
        except (zlib.error, ValueError, TypeError):
            self.stats["bad_rows"] += 1
            self._delete(node)
            return None
        return obs, row[1]

    def put(self, node: bytes, parent: bytes | None, action: str, obs: dict[str, Any]) -> str:
        """Remember the engine's answer at `node` (written in batches); its digest."""
        digest = hashlib.sha1(_canonical(obs)).hexdigest()
        self._pending[node] = (parent, action, obs, digest)
        if len(self._pending) >= _FLUSH_ROWS:
            self.flush()
        return digest

    def replace(self, node: bytes, parent: bytes | None, action: str, obs: dict[str, Any]) -> str:
        """Overwrite the entry at `node` with what the engine says, now; its digest."""
        digest = self.put(node, parent, action, obs)
        self.flush()
        return digest

    def _delete(self, node: bytes) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("DELETE FROM steps WHERE node = ?", (node,))
        except sqlite3.Error as exc:
            self._failed(exc)

    def maybe_flush(self) -> None:
        if self._pending and time.monotonic() - self._last_flush >= _FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write what is pending in one transaction. While others hold the lock the rows wait (up
        to a bound); on a damaged file the cache starts over and writes them there."""
        self._last_flush = time.monotonic()
        if not self._pending or self._db is None:
            return
        rows = [(node, parent, action, zlib.compress(_canonical(obs), 1), digest)
                for node, (parent, action, obs, digest) in self._pending.items()]
        for attempt in (1, 2):
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO steps (node, parent, action, obs, digest) "
                                     "VALUES (?, ?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
                self._pending.clear()
                return
            except sqlite3.Error as exc:
                if self._db is not None and self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                if _transient(exc):
                    if len(self._pending) > _MAX_PENDING:
                        self.stats["dropped_writes"] += len(self._pending)
                        self._pending.clear()
                    return
                self._start_over(exc)
                if attempt == 2 or self._db is None:
                    return

    def __len__(self) -> int:
        """Entries stored (pending writes are flushed first)."""
        self.flush()
        if self._db is None:
            return len(self._pending)
        try:
            return self._db.execute("SELECT count(*) FROM steps").fetchone()[0] + len(self._pending)
        except sqlite3.Error:
            return len(self._pending)

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None


__all__ = ["StepCache", "game_key", "root_node", "child_node", "default_path", "DEFAULT_MAX_ENTRIES", "MEMORY"]
