"""The concurrent ALFWorld engine (`EnginePool`, `EngineEpisode`, `EngineError`), used by the episode
loop from one asyncio event loop::

    main process (asyncio)            worker i (spawned on first need)         episode child
    EnginePool ──control socketpair──▶ LRU of loaded+reset envs; on "fork":     (os.fork of the
        ▲                              reset the game if not cached, fork ────▶  worker: owns one
        │                                                                        episode, steps it)
        └──────── Unix socket server in a private temp dir ◀── hello, then one reply per step ─┘

A reset costs 1-2 s, a step ~60 ms; forking a worker that holds a reset env gives a fresh episode in
tens of ms. Episodes on the same game always go to the same worker (stable hash of the game key), so
its env cache hits. On top of that the step cache (`harnevo.envs.stepcache`, a SQLite file shared by
every run) answers (game, action history) prefixes already played without touching the engine.

The step cache heals itself. Whenever an episode falls back to the engine, its child replays the
actions the cache answered and reports each answer's digest; an entry the engine contradicts is
replaced by the engine's observation (`step_cache_mismatches`) and the episode goes on from the
engine's real state. Episodes that closed with answers no engine confirmed (full cache hits) are
audited in a seeded fraction (`audit`, default 1 in 20): after `close` returns, a background task
replays them in a forked child and heals what differs. An audit never changes the episode it checks.

Processes and sockets are here; the worker side is `harnevo.envs.worker`, the messages are
`harnevo.envs.wire`. This module never imports textworld.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import Any

from harnevo.envs.alfworld import EXPERT_TYPES, Observation
from harnevo.envs.stepcache import DEFAULT_MAX_ENTRIES, MEMORY, StepCache, child_node, default_path, game_key, root_node
from harnevo.envs.wire import LINE_LIMIT, encode, obs_digest, one_line
from harnevo.envs.worker import WORKER_COMMAND
from harnevo.errors import HarnevoError


class EngineError(Exception):
    """One episode's engine failed (bad game file, its process died, a step or reset timed out).
    The message is one line. The pool keeps serving other episodes."""


class _ProcessGone(EngineError):
    """The episode process ended (EOF): there is nothing left to kill."""


def _kill_groups(pgids: set[int]) -> None:
    """SIGKILL whole process groups (a worker and every child it forked). Last-resort cleanup."""
    for pgid in list(pgids):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _cleanup(pgids: set[int], tmp: str | None) -> None:
    _kill_groups(pgids)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


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
        """The last error line of the worker's log (else its last line)."""
        try:
            lines = [ln for ln in Path(self.log_path).read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        errors = [ln for ln in lines if "error" in ln.lower() or "exception" in ln.lower()]
        return one_line((errors or lines)[-1]) if lines else ""


def _cache_location(step_cache: str | os.PathLike | None) -> str | Path | None:
    if step_cache is None:
        return None
    if isinstance(step_cache, (bool, int, float)):
        raise TypeError("step_cache is a file path, 'default', ':memory:' or None (off), not a number")
    if str(step_cache) == "default":
        return default_path()
    return MEMORY if str(step_cache) == MEMORY else Path(step_cache).expanduser()


class EnginePool:
    """Runs ALFWorld episodes concurrently for one asyncio event loop.

    `workers` processes (default: one per core; each started when first needed) keep up to
    `max_cached_games` games loaded and reset; an episode is a fork of its game's worker. `expert`
    ('handcoded' or 'planner') makes every Observation carry the expert's next action in `expert_plan`
    (slower steps; its random choices are seeded, so episodes stay reproducible). `step_timeout_s`
    bounds one step; a reset gets max(60 s, step_timeout_s). `parse_memo` makes steps and resets
    cheaper, exactly (see `enable_parse_cache`).

    `step_cache`: where the step cache lives: 'default' (`cache_root()/steps.sqlite`, shared by every
    run), a file path, ':memory:' (this pool only) or None (off). `step_cache_max_entries` bounds the
    file (the oldest go first). `audit`: the fraction of episodes closed with unconfirmed cache answers
    that are replayed on the engine in the background (0 to 1); which ones is a function of
    `audit_seed` and the episode's path, not of timing. `audit_wait_s`: how long leaving the pool waits
    for audits still running. See the module docstring for how the cache heals.

    Use as `async with EnginePool() as pool: ep = await pool.new_episode(path)`.
    """

    def __init__(self, workers: int | None = None, *, expert: str | None = None, max_cached_games: int = 32,
                 step_timeout_s: float = 120.0, step_cache: str | os.PathLike | None = "default",
                 step_cache_max_entries: int = DEFAULT_MAX_ENTRIES, audit: float = 0.05, audit_seed: int = 0,
                 audit_wait_s: float = 30.0, parse_memo: bool = True):
        if expert is not None and expert not in EXPERT_TYPES:
            raise ValueError(f"unknown expert {expert!r}; expected one of {EXPERT_TYPES}")
        if not 0.0 <= float(audit) <= 1.0:
            raise ValueError(f"audit is a fraction between 0 and 1, got {audit!r}")
        self.n_workers = max(1, int(workers or os.cpu_count() or 1))
        self.expert = expert
        self.max_cached_games = max(1, int(max_cached_games))
        self.step_timeout_s = float(step_timeout_s)
        self.reset_timeout_s = max(60.0, self.step_timeout_s)  # resets take seconds on a busy machine
        self.worker_timeout_s = self.reset_timeout_s + 15.0  # one request; then the worker is killed
        self.parse_memo = bool(parse_memo)
        self.step_cache_path = _cache_location(step_cache)
        self.step_cache_max_entries = int(step_cache_max_entries)
        self.audit = float(audit)
        self.audit_seed = int(audit_seed)
        self.audit_wait_s = float(audit_wait_s)
        self.stats: dict[str, float] = dict.fromkeys(
            ["episodes", "resets", "reset_seconds", "cache_hits", "cache_misses", "forks", "fork_seconds",
             "evictions", "steps", "engine_step_seconds", "errors", "worker_restarts", "step_cache_hits",
             "step_cache_misses", "replayed_steps", "step_cache_mismatches", "audits", "audited_steps",
             "audit_errors"], 0)
        self._cache: StepCache | None = None
        self._workers = [_Worker(i) for i in range(self.n_workers)]
        self._started_once = False  # some worker of this pool reported ready
        self._fatal = ""  # why the engine could not start at all
        self._pgids: set[int] = set()
        self._episodes: dict[int, EngineEpisode] = {}
        self._awaiting: dict[int, asyncio.Future] = {}  # episode id -> its child's connection
        self._learned: set[tuple[str | None, ...]] = set()  # parse-memo keys already sent to the workers
        self._audits: set[asyncio.Task] = set()
        self._ends: dict[bytes, int] = {}  # how many episodes closed at each step-cache node
        self._ids = itertools.count(1)
        self._tmp: str | None = None
        self._sock_path = ""
        self._server: asyncio.AbstractServer | None = None
        self._watchdog: asyncio.Task | None = None
        self._finalizer: weakref.finalize | None = None
        self._open = False

    @property
    def step_cache(self) -> StepCache | None:
        """The open step cache (None when off or outside `async with`)."""
        return self._cache

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> "EnginePool":
        self._tmp = tempfile.mkdtemp(prefix="harnevo-engine-")
        if len(self._tmp) > 80:  # AF_UNIX paths are limited to ~107 bytes
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = tempfile.mkdtemp(prefix="harnevo-engine-", dir="/tmp")
        self._sock_path = os.path.join(self._tmp, "engine.sock")
        self._finalizer = weakref.finalize(self, _cleanup, self._pgids, self._tmp)
        try:
            if self.step_cache_path is not None:
                self._cache = StepCache(self.step_cache_path, max_entries=self.step_cache_max_entries)
            self._server = await asyncio.start_unix_server(self._on_child, path=self._sock_path, limit=LINE_LIMIT)
            self._open = True
            self._watchdog = asyncio.create_task(self._watch())
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self._audits:
            await asyncio.wait(set(self._audits), timeout=self.audit_wait_s)
        await self._shutdown()

    async def wait_audits(self, timeout: float | None = None) -> None:
        """Wait until the audits started so far have finished (or `timeout` seconds passed)."""
        if self._audits:
            await asyncio.wait(set(self._audits), timeout=timeout)

    async def _shutdown(self) -> None:
        """Stop everything. The synchronous part runs first, so even a cancelled shutdown leaves no
        process behind: close episode sockets, SIGTERM workers (each kills and reaps its children),
        then wait a little, then SIGKILL every process group this pool ever started."""
        self._open = False
        try:
            if self._watchdog is not None:
                self._watchdog.cancel()
            for task in list(self._audits):
                task.cancel()
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
            if self._cache is not None:
                self._cache.close()
                self._cache = None
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
                    sys.executable, "-c", WORKER_COMMAND, json.dumps(cfg), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=log, pass_fds=(theirs.fileno(),), start_new_session=True,
                    env=env)
        finally:
            theirs.close()
        self._pgids.add(w.proc.pid)  # start_new_session: the worker leads its own process group
        w.reader, w.writer = await asyncio.open_unix_connection(sock=ours, limit=LINE_LIMIT)
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
        self._started_once = True
        w.reader_task = asyncio.create_task(self._read_worker(w, w.generation, w.reader))

    async def _ensure_worker(self, w: _Worker) -> None:
        """Start the worker when first needed, restart it after it died. A pool none of whose
        workers ever started cannot play at all: that is a HarnevoError, not an episode's error."""
        if w.alive:
            return
        async with w.lock:
            if w.alive:
                return
            if not self._open:
                raise EngineError("the engine pool is closed")
            if self._fatal:
                raise HarnevoError(self._fatal)
            if w.generation:
                self.stats["worker_restarts"] += 1
            try:
                await self._start_worker(w)
            except EngineError as exc:
                if not self._started_once:
                    self._fatal = f"the ALFWorld engine did not start: {exc}"
                    raise HarnevoError(self._fatal) from None
                raise
            if self._learned and w.writer is not None:
                w.writer.write(encode({"op": "warm", "keys": [list(k) for k in self._learned]}))

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
            w.death = one_line(exc)
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

    # ------------------------------------------------------------------ engine requests
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
        line = encode({"op": "warm", "keys": new})
        for w in self._workers:
            if w.alive and w.writer is not None:
                w.writer.write(line)

    def _worker_for(self, key: str) -> _Worker:
        h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
        return self._workers[h % len(self._workers)]

    async def _request(self, w: _Worker, msg: dict[str, Any]) -> dict[str, Any]:
        await self._ensure_worker(w)
        assert w.writer is not None
        fut = asyncio.get_running_loop().create_future()
        if not w.pending:
            w.head_since = time.monotonic()
        w.pending.append(fut)
        w.writer.write(encode(msg))
        return await fut

    async def _spawn(self, path: str, key: str) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter,
                                                         dict[str, Any], bool]:
        """Have the game's worker fork a child for a new episode; its (pid, streams, hello, cached)."""
        eid = next(self._ids)
        child = asyncio.get_running_loop().create_future()
        self._awaiting[eid] = child
        try:
            reply = await self._request(self._worker_for(key), {"op": "fork", "episode": eid, "path": path,
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

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, msg: dict[str, Any],
                        timeout: float) -> dict[str, Any]:
        """Send one request to an episode process and read its answer (EngineError when it fails)."""
        writer.write(encode(msg))
        try:
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), timeout)
        except asyncio.TimeoutError:
            self.stats["errors"] += 1
            raise EngineError(f"step {msg.get('action')!r} timed out after {timeout:g} s") from None
        except (ConnectionError, ValueError) as exc:
            self.stats["errors"] += 1
            raise EngineError(f"lost the episode process: {one_line(exc)}") from None
        if not line:
            self.stats["errors"] += 1
            raise _ProcessGone("the episode process died")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = {"error": f"unreadable answer from episode process: {one_line(line.decode(errors='replace'))}"}
        if answer.get("op") != "obs":
            self.stats["errors"] += 1
            raise EngineError(answer.get("error") or f"unexpected answer from episode process: {answer}")
        if answer.get("learned"):
            self._share_learned(answer["learned"])
        return answer

    # ------------------------------------------------------------------ step cache healing and audits
    def _heal(self, node: bytes, parent: bytes | None, action: str, obs: dict[str, Any]) -> str:
        """The engine contradicts the cache at `node`: its answer replaces the entry; the new digest."""
        assert self._cache is not None
        self.stats["step_cache_mismatches"] += 1
        return self._cache.replace(node, parent, action, obs)

    def _audit_due(self, node: bytes) -> bool:
        """Whether the next episode to close at `node` with unconfirmed answers is audited: a hash of
        (audit_seed, node, how many closed there before) against `audit`, so the choice depends on
        the episode's path only, never on timing."""
        if self.audit <= 0:
            return False
        n = self._ends.get(node, 0) + 1
        self._ends[node] = n
        h = hashlib.blake2b(f"{self.audit_seed}:{n}:".encode() + node, digest_size=8).digest()
        return int.from_bytes(h, "big") < self.audit * 2.0 ** 64

    def _start_audit(self, job: "_Audit") -> None:
        task = asyncio.create_task(self._run_audit(job))
        self._audits.add(task)
        task.add_done_callback(self._audits.discard)

    async def _run_audit(self, job: "_Audit") -> None:
        """Replay an episode's unconfirmed answers on the engine (its own child when it still has one,
        else a fresh fork) and heal every entry that differs."""
        reader, writer = job.reader, job.writer
        try:
            base = job.applied
            if writer is None:
                _pid, reader, writer, hello, _cached = await self._spawn(job.path, job.key)
                if obs_digest(hello["first"]) != job.digests[0]:
                    self._heal(job.nodes[0], None, "", hello["first"])
                base = 0
            assert reader is not None and writer is not None
            replay = job.history[base:]
            answer = await self._exchange(reader, writer, {"op": "step", "action": None, "replay": replay,
                                                           "expect": job.digests[base + 1:]},
                                          self.step_timeout_s * (1 + len(replay)))
            self.stats["audits"] += 1
            self.stats["audited_steps"] += len(replay)
            for i, obs in answer.get("corrected") or []:
                j = base + int(i)
                self._heal(job.nodes[j + 1], job.nodes[j], job.history[j], obs)
        except (EngineError, HarnevoError):
            self.stats["audit_errors"] += 1
        finally:
            if writer is not None and not writer.is_closing():
                with suppress(ConnectionError, RuntimeError):
                    writer.write(encode({"op": "close"}))
                writer.close()

    # ------------------------------------------------------------------ episodes
    async def new_episode(self, game_file: str) -> "EngineEpisode":
        """A fresh episode on `game_file`, at its start state. Raises EngineError for this game only."""
        self._check_open()
        t0 = time.perf_counter()
        path = os.path.realpath(game_file)
        try:
            if os.path.isdir(path):
                raise IsADirectoryError(0, "not a file")
            key = game_key(path, expert=self.expert)
        except OSError as exc:
            self.stats["errors"] += 1
            raise EngineError(f"cannot open game {game_file}: {exc.strerror or one_line(exc)}") from None
        ep = EngineEpisode(self, path, key)
        cache = self._cache
        root = cache.get(ep._nodes[0]) if cache is not None else None
        if root is not None:  # first observation known: the child is forked only if a step misses
            first, digest = root
            ep.first = Observation.from_dict(first)
            ep._digests.append(digest)
            ep.forked_from_cache = True
        else:
            pid, reader, writer, hello, cached = await self._spawn(path, key)
            ep._attach(pid, reader, writer)
            ep.first = Observation.from_dict(hello["first"])
            ep.forked_from_cache = cached
            ep._digests.append(cache.put(ep._nodes[0], None, "", hello["first"]) if cache is not None
                               else obs_digest(hello["first"]))
        self.stats["episodes"] += 1
        ep.start_seconds = time.perf_counter() - t0
        self._episodes[id(ep)] = ep
        return ep


class _Audit:
    """What an audit needs of a closed episode (its streams when its child is still there)."""

    def __init__(self, ep: "EngineEpisode"):
        self.path, self.key = ep.game_file, ep._key
        self.history, self.nodes, self.digests = list(ep.history), list(ep._nodes), list(ep._digests)
        self.applied = ep._applied
        self.reader, self.writer = ep._reader, ep._writer


class EngineEpisode:
    """One game being played. `first` is the observation after reset; `step` plays one action.
    Steps of one episode run one at a time; a step that fails, times out or is cancelled ends the
    episode (its process is killed) and later steps raise EngineError. `corrections` counts the
    answers this episode got from the step cache that the engine contradicted later in the episode
    (each was healed; the episode went on from the engine's real state)."""

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
        self.corrections = 0
        self.history: list[str] = []  # actions played
        self._nodes: list[bytes] = [root_node(key)]  # step-cache node of the start and after each action
        self._digests: list[str] = []  # digest of the first observation and of each one returned
        self._applied = 0  # how many of `history` the child has played (the rest came from the cache)
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
            pool = self.pool
            pool._check_open()
            stats, cache = pool.stats, pool._cache
            node = child_node(self._nodes[-1], action)
            if cache is not None:
                hit = cache.get(node)
                if hit is not None:
                    obs, digest = hit
                    self.history.append(action)
                    self._nodes.append(node)
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
            stats["steps"] += 1
            stats["engine_step_seconds"] += msg["engine_s"]
            digest = (cache.put(node, self._nodes[-1], action, msg["obs"]) if cache is not None
                      else obs_digest(msg["obs"]))
            self.history.append(action)
            self._nodes.append(node)
            self._digests.append(digest)
            self._applied = len(self.history)
            return Observation.from_dict(msg["obs"])

    async def _engine_step(self, action: str) -> dict[str, Any]:
        pool = self.pool
        if self._writer is None:  # started from the step cache: fork a child now
            pid, reader, writer, hello, _cached = await pool._spawn(self.game_file, self._key)
            self._attach(pid, reader, writer)
            if obs_digest(hello["first"]) != self._digests[0]:
                self._digests[0] = pool._heal(self._nodes[0], None, "", hello["first"])
                self.corrections += 1
        assert self._reader is not None and self._writer is not None
        replay = self.history[self._applied:]
        try:
            msg = await pool._exchange(self._reader, self._writer,
                                       {"op": "step", "action": action, "replay": replay,
                                        "expect": self._digests[self._applied + 1:]},
                                       pool.step_timeout_s * (1 + len(replay)))
        except _ProcessGone:
            self._pid = 0  # gone already: nothing to kill (its pid may be reused)
            raise
        if replay:
            pool.stats["replayed_steps"] += len(replay)
            for i, obs in msg.get("corrected") or []:
                j = self._applied + int(i)
                self._digests[j + 1] = pool._heal(self._nodes[j + 1], self._nodes[j], self.history[j], obs)
                self.corrections += 1
        return msg

    async def close(self) -> None:
        """End the episode; its process exits. Idempotent. When the step cache answered steps no
        engine confirmed, the episode may be chosen for an audit, which runs after this returns."""
        if self._closed:
            return
        pool = self.pool
        unconfirmed = self._writer is None or self._applied < len(self.history)
        if pool._open and pool._cache is not None and unconfirmed and pool._audit_due(self._nodes[-1]):
            pool._start_audit(_Audit(self))  # it takes over this episode's process, if any
            self._writer = None
        writer = self._writer
        if writer is not None and not writer.is_closing():
            with suppress(ConnectionError, RuntimeError):
                writer.write(b'{"op": "close"}\n')
        self._drop(kill=False)
        if pool._cache is not None:
            pool._cache.maybe_flush()


__all__ = ["EngineError", "EnginePool", "EngineEpisode"]
