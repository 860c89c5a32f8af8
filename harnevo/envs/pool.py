"""The concurrent ALFWorld engine (`EnginePool`, `EngineEpisode`, `EngineError`), used by the episode
loop from one asyncio event loop::

    main process (asyncio)            worker i (one per core, spawned)         episode child
    EnginePool ──control socketpair──▶ LRU of loaded+reset envs; on "fork":     (os.fork of the
        ▲                              reset the game if not cached, fork ────▶  worker: owns one
        │                                                                        episode, steps it)
        └──────── Unix socket server in a private temp dir ◀── hello, then one reply per step ─┘

A reset costs 1-2 s, a step ~60 ms; forking a worker that holds a reset env gives a fresh episode in
tens of ms. Episodes on the same game always go to the same worker (stable hash), so its cache hits.
The worker's cached env never steps: only children do, so it stays at its start state.
On top of that, an optional exact step cache in the main process answers (game, action history)
prefixes that were already played without touching the engine (see `_StepCache`).

This module owns the processes, sockets and caches; it never imports `textworld` itself: the engine
basics (`make_env`, `reset`, `step`, the parse memo, `preload`) come from `harnevo.envs.alfworld`.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import weakref
from collections import OrderedDict, deque
from contextlib import suppress
from pathlib import Path
from typing import Any

from harnevo.envs.alfworld import (EXPERT_TYPES, Observation, _drain_learned, _warm_parse_memo, deadline,
                                   enable_parse_cache, make_env, preload, reset, step)
from harnevo.errors import HarnevoError


class EngineError(Exception):
    """One episode's engine failed (bad game file, its process died, a step or reset timed out).
    The message is one line. The pool keeps serving other episodes."""


_LINE_LIMIT = 64 * 1024 * 1024  # bytes per JSON line (observations are a few KB)
_IDLE = object()  # _Channel.recv: nothing arrived before the timeout


def _one_line(exc: BaseException | str, limit: int = 300) -> str:
    text = exc if isinstance(exc, str) else (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _digest(obs: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obs, sort_keys=True).encode()).hexdigest()


def _game_key(path: str, st: os.stat_result) -> str:
    """Identifies a game file's content for the caches: its real path, size and mtime."""
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


class _Channel:
    """Blocking JSON lines over a socket, for the worker and child processes."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()

    def send(self, msg: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(msg).encode() + b"\n")

    def recv(self, timeout: float | None = None) -> Any:
        """The next message; None at EOF; `_IDLE` when `timeout` passed with no complete line."""
        while b"\n" not in self._buf:
            if timeout is not None and not select.select([self.sock], [], [], timeout)[0]:
                return _IDLE
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        line, _, rest = self._buf.partition(b"\n")
        self._buf = bytearray(rest)
        return json.loads(line)


# ----------------------------------------------------------------------------- worker process side

def _reap(children: set[int]) -> None:
    """Collect every exited child without blocking (no zombies)."""
    while children:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)


def _kill_children(children: set[int]) -> None:
    for pid in list(children):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in list(children):
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)
    children.clear()


def _worker_main() -> None:
    """Entry point of a worker process (`python -c ...` from EnginePool; config as JSON in argv[1]).

    Loop: read {"op": "fork", "episode", "path", "key"}; reset the game unless cached; fork a child
    that connects to the pool's socket and owns the episode; answer {"op": "forked", ...} or
    {"op": "error", ...}. Exits (killing and reaping its children) on EOF of the control socket or
    on SIGTERM."""
    cfg = json.loads(sys.argv[1])
    chan = _Channel(socket.socket(fileno=cfg["fd"]))
    children: set[int] = set()

    def on_term(signum, frame):
        _kill_children(children)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        preload()  # import the engine before "ready": resets are then timed alone
        if cfg["parse_memo"]:
            enable_parse_cache()  # the parse memo, and the PDDL translation shared by load and reset
    except Exception as exc:
        chan.send({"op": "fatal", "error": _one_line(exc)})
        os._exit(1)
    chan.send({"op": "ready", "pid": os.getpid()})

    try:
        _worker_loop(chan, cfg, children)
    except BaseException:
        traceback.print_exc()  # to the worker's log file; the pool sees EOF and restarts the worker
    finally:
        _kill_children(children)
        if os.getppid() != cfg["parent"]:  # the main process died without cleaning up: do it
            shutil.rmtree(os.path.dirname(cfg["sock"]), ignore_errors=True)
        os._exit(0)


def _worker_loop(chan: _Channel, cfg: dict[str, Any], children: set[int]) -> None:
    cache: OrderedDict[str, tuple[Any, Observation]] = OrderedDict()
    while True:
        _reap(children)
        msg = chan.recv(timeout=1.0)
        if msg is _IDLE:
            continue
        if msg is None:
            return
        if msg.get("op") == "warm":  # no answer expected
            _warm_parse_memo(msg["keys"])
            gc.freeze()
            continue
        eid, path, key = msg["episode"], msg["path"], msg["key"]
        entry, reset_s, evicted = cache.get(key), 0.0, 0
        if entry is None:
            t0 = time.perf_counter()
            try:
                with deadline(cfg["reset_timeout_s"]):
                    random.seed(0)  # ALFWorld's handcoded expert draws from `random`: make it reproducible
                    env = make_env(path, expert=cfg["expert"])
                    entry = (env, reset(env))
            except Exception as exc:  # any failure of this game is this episode's error
                chan.send({"op": "error", "episode": eid, "error": f"cannot start game {path}: {_one_line(exc)}"})
                continue
            reset_s = time.perf_counter() - t0
            cache[key] = entry
            while len(cache) > cfg["max_cached"]:
                _key, (old_env, _obs) = cache.popitem(last=False)
                evicted += 1
                with suppress(Exception):
                    old_env.close()
            if evicted:
                gc.unfreeze()  # frozen objects are never collected: let the evicted envs go
                del old_env
                gc.collect()
            _drain_learned()  # what a reset parses is already in this process's memo
            gc.freeze()  # children's garbage collector then leaves the cached envs' pages shared
        else:
            cache.move_to_end(key)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            _child_main(chan, cfg["sock"], eid, entry[0], entry[1])  # never returns
        children.add(pid)
        chan.send({"op": "forked", "episode": eid, "pid": pid, "cached": reset_s == 0.0, "reset_s": reset_s,
                   "fork_s": time.perf_counter() - t0, "evicted": evicted})


def _child_main(worker_chan: _Channel, sock_path: str, eid: int, env: Any, first: Observation) -> None:
    """A forked episode: connect to the pool, say hello with the first observation, then serve steps
    until "close" or EOF. Always ends with os._exit (no cleanup of the parent's state)."""
    code = 0
    try:
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        worker_chan.sock.close()  # the worker's EOF must not depend on its children
        random.seed(0)  # the expert's choices: a function of the game and the actions played
        _drain_learned()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(sock_path)
        chan = _Channel(sock)
        chan.send({"op": "hello", "episode": eid, "pid": os.getpid(), "first": first.to_dict()})
        while True:
            msg = chan.recv()
            if msg is None or msg.get("op") == "close":
                break
            replayed: list[str] = []
            try:
                for action in msg.get("replay", []):  # actions the step cache answered earlier
                    replayed.append(_digest(step(env, action).to_dict()))
                t0 = time.perf_counter()
                obs = step(env, msg["action"])
                engine_s = time.perf_counter() - t0
            except Exception as exc:
                chan.send({"op": "error", "error": f"step failed: {_one_line(exc)}"})
                break
            chan.send({"op": "obs", "obs": obs.to_dict(), "engine_s": engine_s, "replayed": replayed,
                       "learned": _drain_learned()})
    except BaseException:
        traceback.print_exc()  # to the worker's log file
        code = 1
    finally:
        os._exit(code)


# ------------------------------------------------------------------------------- main process side

class _StepCache:
    """An exact memo of the engine: (game file content, actions played so far) -> Observation.

    TextWorld's PDDL engine and ALFWorld's wrappers make no random choice (checked: identical
    observations across processes and hash seeds), so an observation is a function of the game and the
    action history. Entries form a trie: key (parent node, action) -> (node, observation); a game's
    root is (0, game key) -> (node, first observation). LRU-bounded; every time an episode falls back
    to the engine, the engine replays the cached prefix and its answers are checked against the cache.
    """

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._d: OrderedDict[tuple[int, str], tuple[int, dict[str, Any], str]] = OrderedDict()
        self._ids = itertools.count(1)

    def get(self, node: int, action: str) -> tuple[int, dict[str, Any], str] | None:
        hit = self._d.get((node, action))
        if hit is not None:
            self._d.move_to_end((node, action))
        return hit

    def put(self, node: int, action: str, obs: dict[str, Any]) -> tuple[int, str]:
        new, digest = next(self._ids), _digest(obs)
        self._d[(node, action)] = (new, obs, digest)
        while len(self._d) > self.max_entries:
            self._d.popitem(last=False)
        return new, digest

    def __len__(self) -> int:
        return len(self._d)


def _kill_groups(pgids: set[int]) -> None:
    """SIGKILL whole process groups (a worker and every child it forked). Last-resort cleanup."""
    for pgid in list(pgids):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class _Worker:
    """The main process's handle on one worker process."""

    def __init__(self, index: int):
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: deque[asyncio.Future] = deque()  # requests in the order the worker serves them
        self.head_since = 0.0  # when the worker started on pending[0]
        self.reader_task: asyncio.Task | None = None
        self.lock = asyncio.Lock()  # one (re)start at a time
        self.alive = False
        self.generation = 0  # bumped at every (re)start; stale reader tasks check it
        self.death = ""
        self.log_path = ""

    def log_tail(self) -> str:
        try:
            lines = [ln for ln in Path(self.log_path).read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return _one_line(lines[-1]) if lines else ""


class EnginePool:
    """Runs ALFWorld episodes concurrently for one asyncio event loop.

    `workers` processes (default: one per core) each keep up to `max_cached_games` games loaded and
    reset; an episode is a fork of its game's worker. `expert` ('handcoded' or 'planner') makes every
    Observation carry the expert's next action in `expert_plan` (slower steps). `step_timeout_s`
    bounds one step; a reset gets max(60 s, step_timeout_s). `step_cache` (entries, a few KB each; 0 turns it off) memoises
    observations by (game, action history) so prefixes already played cost nothing; it returns exactly
    what the engine returns (checked again whenever the engine replays a cached prefix). `parse_memo` makes steps and resets cheaper, also exactly (see `enable_parse_cache`). The handcoded
    expert's random choices are seeded, so with `expert` set an episode is reproducible too.
    Use as `async with EnginePool() as pool: ep = await pool.new_episode(path)`.
    """

    def __init__(self, workers: int | None = None, *, expert: str | None = None, max_cached_games: int = 32,
                 step_timeout_s: float = 120.0, step_cache: int = 10_000, parse_memo: bool = True):
        if expert is not None and expert not in EXPERT_TYPES:
            raise ValueError(f"unknown expert {expert!r}; expected one of {EXPERT_TYPES}")
        self.n_workers = max(1, int(workers or os.cpu_count() or 1))
        self.expert = expert
        self.max_cached_games = max(1, int(max_cached_games))
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = max(60.0, self.step_timeout_s)  # resets take seconds on a busy machine
        self.worker_timeout_s = self.reset_timeout_s + 15.0  # one request; then the worker is killed
        self.parse_memo = bool(parse_memo)
        self.stats: dict[str, float] = dict.fromkeys(
            ["episodes", "resets", "reset_seconds", "cache_hits", "cache_misses", "forks", "fork_seconds",
             "evictions", "steps", "engine_step_seconds", "errors", "worker_restarts", "step_cache_hits",
             "step_cache_misses", "replayed_steps", "step_cache_mismatches"], 0)
        self._cache = _StepCache(step_cache) if step_cache > 0 else None
        self._workers = [_Worker(i) for i in range(self.n_workers)]
        self._pgids: set[int] = set()
        self._episodes: dict[int, EngineEpisode] = {}
        self._awaiting: dict[int, asyncio.Future] = {}  # episode id -> its child's connection
        self._learned: set[tuple[str | None, ...]] = set()  # parse-memo keys already sent to the workers
        self._ids = itertools.count(1)
        self._tmp: str | None = None
        self._sock_path = ""
        self._server: asyncio.AbstractServer | None = None
        self._watchdog: asyncio.Task | None = None
        self._finalizer: weakref.finalize | None = None
        self._open = False

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> "EnginePool":
        self._tmp = tempfile.mkdtemp(prefix="harnevo-engine-")
        if len(self._tmp) > 80:  # AF_UNIX paths are limited to ~107 bytes
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = tempfile.mkdtemp(prefix="harnevo-engine-", dir="/tmp")
        self._sock_path = os.path.join(self._tmp, "engine.sock")
        self._finalizer = weakref.finalize(self, _cleanup, self._pgids, self._tmp)
        try:
            self._server = await asyncio.start_unix_server(self._on_child, path=self._sock_path, limit=_LINE_LIMIT)
            self._open = True
            await asyncio.gather(*(self._start_worker(w) for w in self._workers))
            self._watchdog = asyncio.create_task(self._watch())
        except BaseException as exc:
            await self._shutdown()
            if isinstance(exc, EngineError):
                raise HarnevoError(f"the ALFWorld engine did not start: {exc}") from None
            raise
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop everything. The synchronous part runs first, so even a cancelled shutdown leaves no
        process behind: close episode sockets, SIGTERM workers (each kills and reaps its children),
        then wait a little, then SIGKILL every process group this pool ever started."""
        self._open = False
        try:
            if self._watchdog is not None:
                self._watchdog.cancel()
            for ep in list(self._episodes.values()):
                ep._drop(kill=False)
            for fut in self._awaiting.values():
                if not fut.done():
                    fut.cancel()
            for w in self._workers:
                w.alive = False  # from here on an EOF is expected: the reader must not SIGKILL the worker
                self._fail_pending(w, "the engine pool is closed")
                if w.writer is not None:
                    w.writer.close()
                if w.proc is not None and w.proc.returncode is None:
                    with suppress(ProcessLookupError):
                        w.proc.terminate()
            procs = [w.proc.wait() for w in self._workers if w.proc is not None]
            if procs:
                await asyncio.wait_for(asyncio.gather(*procs), timeout=5.0)
        except asyncio.TimeoutError:
            pass
        finally:
            for w in self._workers:
                if w.reader_task is not None:
                    w.reader_task.cancel()
            if self._server is not None:
                self._server.close()
            if self._finalizer is not None:
                # SIGKILL every process group this pool started (orphans of crashed workers, workers
                # stuck past the timeout; the rest are gone already) and remove the temp dir
                self._finalizer()

    async def _start_worker(self, w: _Worker) -> None:
        assert self._tmp is not None
        ours, theirs = socket.socketpair()
        w.log_path = os.path.join(self._tmp, f"worker-{w.index}.log")
        cfg = {"fd": theirs.fileno(), "sock": self._sock_path, "expert": self.expert, "parse_memo": self.parse_memo,
               "max_cached": self.max_cached_games, "reset_timeout_s": self.reset_timeout_s, "parent": os.getpid()}
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # so `import harnevo` works uninstalled too
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        try:
            with open(w.log_path, "ab") as log:
                w.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", "from harnevo.envs.pool import _worker_main; _worker_main()",
                    json.dumps(cfg), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    pass_fds=(theirs.fileno(),), start_new_session=True, env=env)
        finally:
            theirs.close()
        self._pgids.add(w.proc.pid)  # start_new_session: the worker leads its own process group
        w.reader, w.writer = await asyncio.open_unix_connection(sock=ours, limit=_LINE_LIMIT)
        try:
            line = await asyncio.wait_for(w.reader.readline(), timeout=max(60.0, self.step_timeout_s))
        except asyncio.TimeoutError:
            line = b""
        msg = json.loads(line) if line else {"op": "fatal", "error": w.log_tail() or "no answer"}
        if msg.get("op") != "ready":
            w.writer.close()
            with suppress(ProcessLookupError):
                w.proc.kill()
            raise EngineError(f"engine worker {w.index} failed to start: {msg.get('error')}")
        w.alive, w.death = True, ""
        w.generation += 1
        w.reader_task = asyncio.create_task(self._read_worker(w, w.generation, w.reader))

    async def _ensure_worker(self, w: _Worker) -> None:
        if w.alive:
            return
        async with w.lock:
            if w.alive:
                return
            if not self._open:
                raise EngineError("the engine pool is closed")
            self.stats["worker_restarts"] += 1
            await self._start_worker(w)
            if self._learned and w.writer is not None:
                w.writer.write(json.dumps({"op": "warm", "keys": [list(k) for k in self._learned]}).encode() + b"\n")

    async def _read_worker(self, w: _Worker, generation: int, reader: asyncio.StreamReader) -> None:
        """Deliver the worker's answers in order; on EOF fail whatever was pending on it."""
        try:
            while True:
                line = await reader.readline()
                if not line or w.generation != generation:
                    break
                msg = json.loads(line)
                if w.pending:
                    fut = w.pending.popleft()
                    w.head_since = time.monotonic()
                    if not fut.done():
                        fut.set_result(msg)
        except (ConnectionError, ValueError) as exc:
            w.death = _one_line(exc)
        finally:
            if w.generation == generation:
                self._worker_gone(w)

    def _worker_gone(self, w: _Worker) -> None:
        """Mark the worker dead (it is restarted on the next request) and fail its pending requests."""
        if not w.alive:
            return
        w.alive = False
        code = w.proc.returncode if w.proc is not None else None
        reason = w.death or f"engine worker {w.index} died" + (f" (exit {code})" if code is not None else "")
        tail = w.log_tail()
        self._fail_pending(w, reason + (f": {tail}" if tail else ""))
        if w.writer is not None:
            w.writer.close()
        if w.proc is not None and w.proc.returncode is None:
            with suppress(ProcessLookupError):
                w.proc.kill()  # its children keep serving their episodes until closed

    def _fail_pending(self, w: _Worker, reason: str) -> None:
        while w.pending:
            fut = w.pending.popleft()
            if not fut.done():
                fut.set_exception(EngineError(reason))

    async def _watch(self) -> None:
        """Kill a worker that spends longer than `worker_timeout_s` on one request (its reset has its
        own alarm; this catches a worker stuck where the alarm cannot reach)."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for w in self._workers:
                if w.alive and w.pending and now - w.head_since > self.worker_timeout_s:
                    w.death = f"engine worker {w.index} timed out after {self.worker_timeout_s:g} s"
                    self._worker_gone(w)

    async def _on_child(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A forked child connected: hand its streams to the episode waiting for it."""
        try:
            hello = json.loads(await asyncio.wait_for(reader.readline(), timeout=self.step_timeout_s))
            fut = self._awaiting.get(int(hello["episode"]))
        except (asyncio.TimeoutError, ValueError, KeyError, TypeError, ConnectionError):
            fut = None
        if fut is None or fut.done():
            writer.close()  # nobody waits (cancelled): EOF makes the child exit
            return
        fut.set_result((reader, writer, hello))

    # ------------------------------------------------------------------ episodes
    def _check_open(self) -> None:
        if not self._open:
            raise EngineError("the engine pool is not running (use `async with EnginePool() as pool`)")

    def _share_learned(self, keys: list[list[str | None]]) -> None:
        """Forward what a child's parse memo learned to every worker (the PDDL domain is the same for
        all games), so that later children start warm. Fire and forget: workers do not answer."""
        new = [k for k in keys if tuple(k) not in self._learned]
        if not new:
            return
        self._learned.update(tuple(k) for k in new)
        line = json.dumps({"op": "warm", "keys": new}).encode() + b"\n"
        for w in self._workers:
            if w.alive and w.writer is not None:
                w.writer.write(line)

    def _worker_for(self, path: str) -> _Worker:
        h = int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "big")
        return self._workers[h % len(self._workers)]

    async def _request(self, w: _Worker, msg: dict[str, Any]) -> dict[str, Any]:
        await self._ensure_worker(w)
        assert w.writer is not None
        fut = asyncio.get_running_loop().create_future()
        if not w.pending:
            w.head_since = time.monotonic()
        w.pending.append(fut)
        w.writer.write(json.dumps(msg).encode() + b"\n")
        return await fut

    async def _spawn(self, path: str, key: str) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter,
                                                         dict[str, Any], bool]:
        """Have the game's worker fork a child for a new episode; its (pid, streams, hello, cached)."""
        eid = next(self._ids)
        child = asyncio.get_running_loop().create_future()
        self._awaiting[eid] = child
        try:
            reply = await self._request(self._worker_for(path), {"op": "fork", "episode": eid, "path": path,
                                                                 "key": key})
            if reply.get("op") != "forked":
                self.stats["errors"] += 1
                raise EngineError(reply.get("error") or f"unexpected answer from engine worker: {reply}")
            cached = bool(reply["cached"])
            self.stats["forks"] += 1
            self.stats["fork_seconds"] += reply["fork_s"]
            self.stats["evictions"] += reply["evicted"]
            self.stats["cache_hits" if cached else "cache_misses"] += 1
            if not cached:
                self.stats["resets"] += 1
                self.stats["reset_seconds"] += reply["reset_s"]
            try:
                reader, writer, hello = await asyncio.wait_for(asyncio.shield(child), self.step_timeout_s)
            except asyncio.TimeoutError:
                with suppress(ProcessLookupError):
                    os.kill(reply["pid"], signal.SIGKILL)
                self.stats["errors"] += 1
                raise EngineError(f"episode process for {path} did not connect") from None
            return int(hello["pid"]), reader, writer, hello, cached
        except BaseException:
            if child.done() and not child.cancelled() and child.exception() is None:
                child.result()[1].close()  # cancelled after the child connected: let it go
            else:
                child.cancel()
            raise
        finally:
            self._awaiting.pop(eid, None)

    async def new_episode(self, game_file: str) -> "EngineEpisode":
        """A fresh episode on `game_file`, at its start state. Raises EngineError for this game only."""
        self._check_open()
        t0 = time.perf_counter()
        path = os.path.realpath(game_file)
        try:
            st = os.stat(path)
            if not os.path.isfile(path):
                raise IsADirectoryError(0, "not a file")
        except OSError as exc:
            self.stats["errors"] += 1
            raise EngineError(f"cannot open game {game_file}: {exc.strerror}") from None
        key = _game_key(path, st)
        ep = EngineEpisode(self, path, key)
        root = self._cache.get(0, key) if self._cache is not None else None
        if root is not None:  # first observation known: the child is forked only if a step misses
            ep._node, first, ep._first_digest = root
            ep.first = Observation.from_dict(first)
            ep.forked_from_cache = True
        else:
            pid, reader, writer, hello, cached = await self._spawn(path, key)
            ep._attach(pid, reader, writer)
            ep.first = Observation.from_dict(hello["first"])
            ep.forked_from_cache = cached
            if self._cache is not None:
                ep._node, ep._first_digest = self._cache.put(0, key, hello["first"])
        self.stats["episodes"] += 1
        ep.start_seconds = time.perf_counter() - t0
        self._episodes[id(ep)] = ep
        return ep


class EngineEpisode:
    """One game being played. `first` is the observation after reset; `step` plays one action.
    Steps of one episode run one at a time; a step that fails, times out or is cancelled ends the
    episode (its process is killed) and later steps raise EngineError."""

    first: Observation
    forked_from_cache: bool
    start_seconds: float

    def __init__(self, pool: EnginePool, path: str, key: str):
        self.pool = pool
        self.game_file = path
        self._key = key
        self.first = Observation(text="")
        self.forked_from_cache = False
        self.start_seconds = 0.0
        self.history: list[str] = []  # actions played
        self._digests: list[str] = []  # digest of each observation returned
        self._first_digest = ""
        self._applied = 0  # how many of `history` the child has played (the rest came from the cache)
        self._node = 0  # step-cache trie node of the current state
        self._pid = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def _attach(self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._pid, self._reader, self._writer = pid, reader, writer

    def _drop(self, *, kill: bool) -> None:
        """End the episode now; `kill` its process when it may still be busy with a step."""
        self._closed = True
        self.pool._episodes.pop(id(self), None)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            if kill and self._pid:
                with suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)

    async def step(self, action: str) -> Observation:
        async with self._lock:
            if self._closed:
                raise EngineError("the episode is closed")
            self.pool._check_open()
            stats, cache = self.pool.stats, self.pool._cache
            if cache is not None:
                hit = cache.get(self._node, action)
                if hit is not None:
                    self._node, obs, digest = hit
                    self.history.append(action)
                    self._digests.append(digest)
                    stats["step_cache_hits"] += 1
                    stats["steps"] += 1
                    return Observation.from_dict(obs)
                stats["step_cache_misses"] += 1
            try:
                msg = await self._engine_step(action)
            except BaseException:
                self._drop(kill=True)
                raise
            self.history.append(action)
            self._applied = len(self.history)
            stats["steps"] += 1
            stats["engine_step_seconds"] += msg["engine_s"]
            if cache is not None:
                self._node, digest = cache.put(self._node, action, msg["obs"])
                self._digests.append(digest)
            return Observation.from_dict(msg["obs"])

    async def _engine_step(self, action: str) -> dict[str, Any]:
        pool = self.pool
        if self._writer is None:  # started from the step cache: fork a child now
            pid, reader, writer, hello, _cached = await pool._spawn(self.game_file, self._key)
            self._attach(pid, reader, writer)
            if _digest(hello["first"]) != self._first_digest:
                pool.stats["step_cache_mismatches"] += 1
                raise EngineError(f"step cache disagrees with the engine on the start of {self.game_file}")
        assert self._reader is not None and self._writer is not None
        replay = self.history[self._applied:]
        self._writer.write(json.dumps({"op": "step", "action": action, "replay": replay}).encode() + b"\n")
        timeout = pool.step_timeout_s * (1 + len(replay))
        try:
            await self._writer.drain()
            line = await asyncio.wait_for(self._reader.readline(), timeout)
        except asyncio.TimeoutError:
            pool.stats["errors"] += 1
            raise EngineError(f"step {action!r} timed out after {timeout:g} s") from None
        except (ConnectionError, ValueError) as exc:
            pool.stats["errors"] += 1
            raise EngineError(f"lost the episode process: {_one_line(exc)}") from None
        if not line:
            pool.stats["errors"] += 1
            self._pid = 0  # gone already: nothing to kill (its pid may be reused)
            raise EngineError("the episode process died")
        msg = json.loads(line)
        if msg.get("op") != "obs":
            pool.stats["errors"] += 1
            raise EngineError(msg.get("error") or f"unexpected answer from episode process: {msg}")
        if msg.get("learned"):
            pool._share_learned(msg["learned"])
        if replay:
            pool.stats["replayed_steps"] += len(replay)
            if msg["replayed"] != self._digests[self._applied:]:
                pool.stats["step_cache_mismatches"] += 1
                raise EngineError(f"step cache disagrees with the engine on {self.game_file}")
        return msg

    async def close(self) -> None:
        """End the episode; its process exits. Idempotent."""
        if self._closed:
            return
        writer = self._writer
        if writer is not None and not writer.is_closing():
            with suppress(ConnectionError, RuntimeError):
                writer.write(b'{"op": "close"}\n')
        self._drop(kill=False)


def _cleanup(pgids: set[int], tmp: str | None) -> None:
    _kill_groups(pgids)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["EngineError", "EnginePool", "EngineEpisode"]
