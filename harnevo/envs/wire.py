"""The engine's wire protocol: JSON lines between the pool (main process), its worker processes and
the forked episode processes, plus the one-line error text and the observation digest they share.

Messages (one JSON object per line):

    pool -> worker   (control socketpair)
        {"op": "fork", "episode": id, "path": game file, "key": game key}   answered in order
        {"op": "warm", "keys": [[module, text, rule], ...]}                 parse-memo warm-up, no answer
    worker -> pool
        {"op": "ready", "pid"} | {"op": "fatal", "error"}                    once, at start
        {"op": "forked", "episode", "pid", "cached", "reset_s", "fork_s", "evicted"}
        | {"op": "error", "episode", "error"}
    episode -> pool  (it connects to the pool's Unix socket)
        {"op": "hello", "episode", "pid", "first": observation}              once
        {"op": "obs", "obs": observation | null, "engine_s", "replayed": [digest], "corrected": [[i, observation]],
         "learned": [...]} | {"op": "error", "error"}                        one per "step"
    pool -> episode
        {"op": "step", "action": text | null, "replay": [action], "expect": [digest]}
            play `replay` first (actions the step cache answered), reporting each one's digest, and the
            full observation of those whose digest differs from `expect`; then play `action` (none: an
            audit that only replays)
        {"op": "close"}

Nothing here imports the engine.
"""

from __future__ import annotations

import hashlib
import json
import select
import socket
from typing import Any

LINE_LIMIT = 64 * 1024 * 1024  # bytes per JSON line (observations are a few KB)
IDLE = object()  # Channel.recv: nothing arrived before the timeout


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg).encode() + b"\n"


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """An error as one line of at most `limit` characters (type name when it has no message)."""
    text = exc if isinstance(exc, str) else (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def obs_digest(obs: dict[str, Any]) -> str:
    """The digest of an observation (as `Observation.to_dict()` gives it), over its canonical JSON."""
    return hashlib.sha1(json.dumps(obs, sort_keys=True).encode()).hexdigest()


class Channel:
    """Blocking JSON lines over a socket, for the worker and episode processes."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()

    def send(self, msg: dict[str, Any]) -> None:
        self.sock.sendall(encode(msg))

    def recv(self, timeout: float | None = None) -> Any:
        """The next message; None at EOF; `IDLE` when `timeout` passed with no complete line."""
        while b"\n" not in self._buf:
            if timeout is not None and not select.select([self.sock], [], [], timeout)[0]:
                return IDLE
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionError:
                return None
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > LINE_LIMIT:
                return None  # not a peer of ours: treat as a lost connection
        line, _, rest = self._buf.partition(b"\n")
        self._buf = bytearray(rest)
        return json.loads(line)


__all__ = ["Channel", "IDLE", "LINE_LIMIT", "encode", "obs_digest", "one_line"]
