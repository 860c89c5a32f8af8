"""The engine's worker process and the episode processes it forks (the engine side of `EnginePool`).

A worker (`main`, started by the pool as `python -c ...`) keeps an LRU of loaded and reset games,
keyed by the game key the pool sends (content hash + engine versions, see `harnevo.envs.stepcache`).
On "fork" it resets the game unless cached and forks a child that owns one episode (`_child_main`):
the child connects to the pool's Unix socket, says hello with the first observation and serves steps.
The worker's cached env never steps, so it stays at its start state for the next fork.

The engine itself (`make_env`, `reset`, `step`, the parse memo) comes from `harnevo.envs.alfworld`;
the messages are those of `harnevo.envs.wire`.
"""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import signal
import socket
import sys
import time
import traceback
from collections import OrderedDict
from contextlib import suppress
from typing import Any

from harnevo.envs.alfworld import (Observation, _drain_learned, _warm_parse_memo, deadline, enable_parse_cache,
                                   make_env, preload, reset, step)
from harnevo.envs.wire import IDLE, Channel, obs_digest, one_line

# How the pool starts a worker (the config as JSON in argv[1]).
WORKER_COMMAND = "from harnevo.envs.worker import main; main()"


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


def main() -> None:
    """Entry point of a worker process. Loop: read {"op": "fork", "episode", "path", "key"}; reset the
    game unless cached; fork a child that connects to the pool's socket and owns the episode; answer
    {"op": "forked", ...} or {"op": "error", ...}. Exits (killing and reaping its children) on EOF of
    the control socket or on SIGTERM."""
    cfg = json.loads(sys.argv[1])
    chan = Channel(socket.socket(fileno=cfg["fd"]))
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
        chan.send({"op": "fatal", "error": one_line(exc)})
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


def _worker_loop(chan: Channel, cfg: dict[str, Any], children: set[int]) -> None:
    cache: OrderedDict[str, tuple[Any, Observation]] = OrderedDict()
    while True:
        _reap(children)
        msg = chan.recv(timeout=1.0)
        if msg is IDLE:
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
                chan.send({"op": "error", "episode": eid, "error": f"cannot start game {path}: {one_line(exc)}"})
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


def _child_main(worker_chan: Channel, sock_path: str, eid: int, env: Any, first: Observation) -> None:
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
        chan = Channel(sock)
        chan.send({"op": "hello", "episode": eid, "pid": os.getpid(), "first": first.to_dict()})
        while True:
            msg = chan.recv()
            if msg is None or msg.get("op") == "close":
                break
            try:
                reply = _serve_step(env, msg)
            except Exception as exc:
                chan.send({"op": "error", "error": f"step failed: {one_line(exc)}"})
                break
            reply["learned"] = _drain_learned()
            chan.send(reply)
    except BaseException:
        traceback.print_exc()  # to the worker's log file
        code = 1
    finally:
        os._exit(code)


def _serve_step(env: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """Replay what the step cache answered (checking each answer against its digest), then play the
    new action, if any."""
    expect = list(msg.get("expect") or [])
    replayed: list[str] = []
    corrected: list[list[Any]] = []
    for i, action in enumerate(msg.get("replay") or []):
        obs = step(env, action).to_dict()
        digest = obs_digest(obs)
        replayed.append(digest)
        if i >= len(expect) or expect[i] != digest:
            corrected.append([i, obs])
    out: dict[str, Any] = {"op": "obs", "obs": None, "engine_s": 0.0, "replayed": replayed, "corrected": corrected}
    if msg.get("action") is not None:
        t0 = time.perf_counter()
        out["obs"] = step(env, msg["action"]).to_dict()
        out["engine_s"] = time.perf_counter() - t0
    return out


__all__ = ["WORKER_COMMAND", "main"]
