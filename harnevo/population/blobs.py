"""Trajectories kept small: every distinct message content is stored once, and a trajectory is a
compressed JSON that points at its messages.

    blobs         id, hash (sha256 of the UTF-8 text), base, depth, size, data
    trajectories  id, codec, data

A message content is looked up by its sha256 and written only when new. A new content is deflated
with a preset dictionary, the text of the *base*: the previous turn's message of the same role in the
same trajectory. The turn message changes a little from turn to turn (one more history line, a new
observation), so against its predecessor it costs a few hundred bytes instead of a compressed 2 KB;
the system prompt repeats every turn and across episodes and costs one row for the whole run.
Decoding a delta needs its base first: `depth` counts the chain and is capped (MAX_DEPTH), past which a
content is stored on its own, so reading a message never walks more than MAX_DEPTH rows.

A trajectory's JSON is `Trajectory.to_dict()` with each message `{"role": r, "content": c}` replaced
by `[blob_id, r]` (a message with other keys: `[blob_id, {its other keys}]`; one without a text
content is kept inline as its dict). References are the blobs' row ids, not their 64-hex hashes: a
hash is 32 incompressible bytes per message, several times the rest of a turn's compressed cost.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from dataclasses import fields
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.runtime.trajectory import SchemaError, Trajectory, Turn

MAX_DEPTH = 64  # longest chain of deltas a message may sit at the end of
CODEC_DEFLATE = 1  # raw deflate (wbits -15) of UTF-8 JSON
_LEVEL = 6
_CACHE_MAX = 4096  # decoded message texts kept in memory
_TRAJ_FIELDS = tuple(f.name for f in fields(Trajectory))
_TURN_FIELDS = tuple(f.name for f in fields(Turn))


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate in a reply round-trips too


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogatepass")


def deflate(raw: bytes, zdict: bytes | None = None) -> bytes:
    c = (zlib.compressobj(_LEVEL, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict) if zdict
         else zlib.compressobj(_LEVEL, zlib.DEFLATED, -15))
    return c.compress(raw) + c.flush()


def inflate(data: bytes, zdict: bytes | None = None) -> bytes:
    d = zlib.decompressobj(-15, zdict) if zdict else zlib.decompressobj(-15)
    out = d.decompress(data) + d.flush()
    if not d.eof:
        raise zlib.error("truncated stream")
    return out


class Blobs:
    """Reads and writes message contents of one store's connection. Writes happen inside the caller's
    transaction; `commit()` / `rollback()` tell it whether the ids it handed out exist."""

    def __init__(self, conn: sqlite3.Connection, where: str):
        self._conn = conn
        self._where = where
        self._texts: dict[int, bytes] = {}  # decoded contents (committed only)
        self._pending: dict[int, bytes] = {}  # written in the open transaction

    # --- writing ------------------------------------------------------------------------------------
    def put(self, raw: bytes, base: tuple[int, int, bytes] | None) -> tuple[int, int]:
        """The (id, depth) of this content, writing it if new; `base` is (id, depth, raw) of the content
        to deflate it against."""
        digest = hashlib.sha256(raw).digest()
        row = self._conn.execute("SELECT id, depth FROM blobs WHERE hash = ?", (digest,)).fetchone()
        if row is not None:
            return row[0], row[1]
        if base is not None and base[1] < MAX_DEPTH:
            base_id, depth, data = base[0], base[1] + 1, deflate(raw, base[2])
        else:
            base_id, depth, data = None, 0, deflate(raw)
        cur = self._conn.execute("INSERT INTO blobs (hash, base, depth, size, data) VALUES (?, ?, ?, ?, ?)",
                                 (digest, base_id, depth, len(raw), data))
        self._pending[cur.lastrowid] = raw
        return cur.lastrowid, depth

    def commit(self) -> None:
        if len(self._texts) + len(self._pending) > _CACHE_MAX:
            self._texts.clear()
        self._texts.update(self._pending)
        self._pending.clear()

    def rollback(self) -> None:
        self._pending.clear()

    # --- reading ------------------------------------------------------------------------------------
    def texts(self, ids: set[int]) -> dict[int, bytes]:
        """The raw contents of these blobs, bases decoded first."""
        out = {i: self._texts[i] for i in ids if i in self._texts}
        rows: dict[int, tuple[int | None, int, bytes, bytes]] = {}
        want = {i for i in ids if i not in out}
        while want:
            batch = sorted(want)[:500]
            want.difference_update(batch)
            marks = ",".join("?" * len(batch))
            found = self._conn.execute(f"SELECT id, base, size, hash, data FROM blobs WHERE id IN ({marks})",
                                       batch).fetchall()
            if len(found) != len(batch):
                missing = sorted(set(batch) - {r[0] for r in found})
                raise HarnevoError(f"{self._where}: message content {missing[0]} is missing; the store is damaged")
            for i, base, size, digest, data in found:
                rows[i] = (base, size, digest, data)
                if base is not None and base not in out and base not in rows:
                    want.add(base)
        for i in sorted(rows):  # ids grow with insertion: a base is older than its deltas
            out[i] = self._decode_row(i, rows[i], out)
        if len(self._texts) + len(out) > _CACHE_MAX:
            self._texts.clear()
        self._texts.update(out)
        return {i: out[i] for i in ids}

    def _decode_row(self, i: int, row: tuple[int | None, int, bytes, bytes], done: dict[int, bytes]) -> bytes:
        base, size, digest, data = row
        try:
            raw = inflate(data, done[base] if base is not None else None)
        except (zlib.error, KeyError):
            raise HarnevoError(f"{self._where}: message content {i} cannot be decompressed; the store is "
                               f"damaged") from None
        if len(raw) != size or hashlib.sha256(raw).digest() != digest:
            raise HarnevoError(f"{self._where}: message content {i} does not match its hash; the store is damaged")
        return raw


def pack(traj: Trajectory, blobs: Blobs) -> bytes:
    """The compressed JSON of `traj` with its message contents written to `blobs`."""
    d = {name: getattr(traj, name) for name in _TRAJ_FIELDS}  # to_dict() without asdict's deep copies:
    d["turns"] = [{name: getattr(t, name) for name in _TURN_FIELDS} for t in traj.turns]  # a third of the time
    prev: dict[Any, tuple[int, int, bytes]] = {}  # (position, role) -> (id, depth, raw) of the last turn's
    seen: dict[str, tuple[int, int, bytes]] = {}  # content -> (id, depth, raw) within this trajectory
    for turn in d["turns"]:
        packed = []
        for pos, m in enumerate(turn["messages"]):
            content = m.get("content") if isinstance(m, dict) else None
            if not isinstance(content, str):
                packed.append(m)
                continue
            slot = (pos, m.get("role"))
            ref = seen.get(content)
            if ref is None:
                raw = _encode(content)
                blob_id, depth = blobs.put(raw, prev.get(slot))
                ref = seen[content] = (blob_id, depth, raw)
            prev[slot] = ref
            rest = {k: v for k, v in m.items() if k != "content"}
            if list(rest) == ["role"] and isinstance(rest["role"], str):
                packed.append([ref[0], rest["role"]])
            else:
                packed.append([ref[0], rest])
        turn["messages"] = packed
    return deflate(json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def unpack(codec: int, data: bytes, blobs: Blobs, *, where: str) -> Trajectory:
    """The Trajectory `pack` stored."""
    if codec != CODEC_DEFLATE:
        raise HarnevoError(f"{where}: trajectory codec {codec} is not one this harnevo reads; upgrade harnevo")
    try:
        d = json.loads(_decode(inflate(data)))
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError):
        raise HarnevoError(f"{where}: the trajectory cannot be decompressed; the store is damaged") from None
    ids = {m[0] for t in d.get("turns", []) for m in t["messages"] if isinstance(m, list)}
    texts = blobs.texts(ids)
    for turn in d.get("turns", []):
        msgs = []
        for m in turn["messages"]:
            if isinstance(m, list):
                content = _decode(texts[m[0]])
                msgs.append({"role": m[1], "content": content} if isinstance(m[1], str)
                            else {**m[1], "content": content})
            else:
                msgs.append(m)
        turn["messages"] = msgs
    try:
        return Trajectory.from_dict(d)
    except SchemaError as e:
        raise HarnevoError(f"{where}: {e}") from None
