"""The population store of one evolution run: `<run_dir>/population.sqlite` (tables: schema.py).

It holds the run's config and versions, every harness with its lineage, every evaluated episode with
its trajectory (compressed, messages stored once: blobs.py) and every generation with the RNG state to
continue from. The evolution loop is its one writer (it takes `FolderLock(run_dir, "run")`); readers in
other processes may open the same store at any time (WAL).

Durability: WAL with `synchronous=NORMAL`, one transaction per call. A call that returned has its
transaction in the WAL, so a process killed at any instant (SIGKILL included) loses nothing that was
recorded, and the file is never left half-written. Power loss may drop the last transactions since the
last checkpoint, never corrupt the file; NORMAL keeps a commit free of fsync, so `record_episode` costs
about a millisecond on the event loop instead of a disk flush.

Episodes: (behaviour_id, model, split, game, sample) is the key. An `infra_error` record is replaced by
the next record of its key (infra errors are replayed); an `ok` record is final, and recording the key
again is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import tempfile
import threading
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harnevo.errors import HarnevoError
from harnevo.harness.spec import Harness
from harnevo.population import schema
from harnevo.population.blobs import CODEC_DEFLATE, Blobs, pack, unpack
from harnevo.runtime.trajectory import OK, STATUSES, Trajectory

STORE_FILE = "population.sqlite"
_TMP_PREFIX = f".{STORE_FILE}."  # a store being created, before it is linked into place
_IGNORED = (".lock",)  # what may sit in a run folder before its store exists (the caller's FolderLock)
_BUSY_MS = 5000
_MIN_PREFIX = 6
_HEX = re.compile(r"^[0-9a-f]+$")

_EPISODE_COLUMNS = ("status", "success", "steps", "env_actions", "meta_actions", "invalid_replies",
                    "prompt_tokens", "completion_tokens", "cost_usd", "spent_usd", "reason", "family",
                    "bank_edits", "bank_seen", "wall_seconds", "harness_id")


@dataclass(frozen=True)
class EpisodeRow:
    """One recorded episode without its trajectory."""

    behaviour_id: str
    model: str
    split: str
    game: str
    sample: int
    status: str
    success: bool
    steps: int
    env_actions: int
    meta_actions: int
    invalid_replies: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    spent_usd: float
    reason: str
    family: str
    bank_edits: list[dict]
    bank_seen: str
    wall_seconds: float
    harness_id: str

    @property
    def ok(self) -> bool:
        return self.status == OK


def config_hash(config: dict) -> str:
    """sha256 of the config's canonical JSON (keys sorted)."""
    return hashlib.sha256(_canonical(config, "config").encode("utf-8")).hexdigest()


def rng_state_to_json(state: object) -> list:
    """`random.Random().getstate()` as JSON lists: [version, [625 ints], gauss_next]."""
    if (not isinstance(state, tuple) or len(state) != 3 or not isinstance(state[0], int)
            or not isinstance(state[1], tuple) or not all(isinstance(x, int) for x in state[1])
            or not (state[2] is None or isinstance(state[2], float))):
        raise HarnevoError("rng_state_to_json takes the value of random.Random().getstate()")
    return [state[0], list(state[1]), state[2]]


def rng_state_from_json(obj: object) -> tuple:
    """The inverse of `rng_state_to_json`: a value for `random.Random().setstate`."""
    if (not isinstance(obj, list) or len(obj) != 3 or not isinstance(obj[0], int)
            or not isinstance(obj[1], list) or not all(isinstance(x, int) for x in obj[1])
            or not (obj[2] is None or isinstance(obj[2], (int, float)))):
        raise HarnevoError("rng_state_from_json takes what rng_state_to_json returned")
    return (obj[0], tuple(obj[1]), None if obj[2] is None else float(obj[2]))


class Store:
    """The population store of one run. Make it with `Store.create` (new run or resume) or `Store.open`."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        """Private: use `create` or `open`."""
        self.path = path
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.RLock()  # the loop writes from one thread; readers may sit in others
        self._blobs = Blobs(conn, str(path))
        self._harnesses: dict[str, Harness] = {}
        self._known: set[str] = set()  # behaviour ids seen in the harnesses table

    # --- opening ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_dir: Path, config: dict, versions: dict) -> "Store":
        """A new store in `run_dir` (new or empty), or the one already there when it holds the same
        config (resume). Another run's store, or a folder of other files, is a one-line HarnevoError."""
        run_dir = Path(run_dir)
        wanted = config_hash(config)
        config_text, versions_text = _canonical(config, "config"), _canonical(versions, "versions")
        if run_dir.exists() and not run_dir.is_dir():
            raise HarnevoError(f"run folder {run_dir} is a file, not a folder")
        db = run_dir / STORE_FILE
        if not db.exists():
            others = sorted(p.name for p in (run_dir.iterdir() if run_dir.is_dir() else ())
                            if p.name not in _IGNORED and not p.name.startswith(_TMP_PREFIX))
            if others:
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                raise HarnevoError(f"run folder {run_dir} holds other files ({shown}) but no {STORE_FILE}; "
                                   f"choose a new or empty folder")
            cls._create_file(run_dir, db, config_text, wanted, versions_text)
        store = cls.open(run_dir)
        held = store._conn.execute("SELECT config_hash FROM run").fetchone()[0]
        if held != wanted:
            store.close()
            raise HarnevoError(f"run folder {run_dir} holds another run (config {held[:12]}, not {wanted[:12]}); "
                               f"resume it with its own config or choose another folder")
        return store

    @staticmethod
    def _create_file(run_dir: Path, db: Path, config_text: str, digest: str, versions_text: str) -> None:
        """Lay the store out in a temp file and link it into place: a store is there whole or not at all,
        and an existing file is never overwritten."""
        run_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".tmp", dir=run_dir)
        os.close(fd)
        os.chmod(tmp, 0o644)  # what SQLite gives a file it creates (mkstemp makes it private)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN")
                schema.initialise(conn)
                conn.execute("INSERT INTO run (id, config, config_hash, versions, created) VALUES (1, ?, ?, ?, ?)",
                             (config_text, digest, versions_text, _now()))
                conn.execute("COMMIT")
            finally:
                conn.close()  # the last connection checkpoints and removes the temp's -wal and -shm
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            try:
                os.link(tmp, db)
            except FileExistsError:
                pass  # another creator won; `open` then compares configs
            except OSError:  # a file system without hard links
                if not db.exists():
                    os.replace(tmp, db)
            _fsync_dir(run_dir)
        finally:
            with suppress(OSError):
                os.unlink(tmp)

    @classmethod
    def open(cls, run_dir: Path) -> "Store":
        """The store of an existing run. A missing or damaged file (not a database, failed integrity
        check, another schema) is a one-line HarnevoError, and the file is left as it was."""
        path = Path(run_dir) / STORE_FILE
        if not path.is_file():
            raise HarnevoError(f"no population store at {path}" + ("" if not path.exists() else " (not a file)"))
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None,
                                   timeout=_BUSY_MS / 1000, check_same_thread=False)
        except sqlite3.Error as e:
            raise HarnevoError(f"cannot open {path}: {_one_line(e)}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            schema.check(conn, str(path))
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as e:
            conn.close()
            raise HarnevoError(f"{path} is damaged or not a population store ({_one_line(e)}); "
                               f"it was left untouched") from None
        except HarnevoError:
            conn.close()
            raise
        return cls(path, conn)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise HarnevoError(f"{self.path}: the store is closed")
        return self._conn

    # --- the run ------------------------------------------------------------------------------------
    def config(self) -> dict:
        with self._lock:
            return json.loads(self._db.execute("SELECT config FROM run").fetchone()[0])

    def versions(self) -> dict:
        with self._lock:
            return json.loads(self._db.execute("SELECT versions FROM run").fetchone()[0])

    def integrity_ok(self) -> bool:
        with self._lock:
            try:
                rows = self._db.execute("PRAGMA integrity_check").fetchall()
            except sqlite3.DatabaseError:
                return False
            return rows == [("ok",)]

    # --- harnesses ------------------------------------------------------------------------------------
    def add_harness(self, h: Harness, *, parents: list[str], operator: str, generation: int,
                    detail: dict | None = None) -> str:
        """Record a harness with its lineage; returns its behaviour id. A behaviour id already recorded
        is left as it was (the first record wins). Parents must be recorded first."""
        bid = h.behaviour_id
        if (not isinstance(parents, list) or not all(isinstance(p, str) for p in parents)
                or not isinstance(operator, str) or not isinstance(generation, int) or generation < 0):
            raise HarnevoError("add_harness: parents is a list of behaviour ids, operator a string, "
                               "generation an int >= 0")
        detail_text = _canonical(detail or {}, "harness detail")
        with self._lock:
            db = self._db
            if self._has_harness(bid):
                return bid
            missing = [p for p in parents if p == bid or not self._has_harness(p)]
            if missing:
                raise HarnevoError(f"add_harness {bid}: parent {missing[0]} is not in the store; add parents first")
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT INTO harnesses (behaviour_id, harness_id, name, yaml, parents, operator, "
                           "generation, detail, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (bid, h.id, h.name, h.to_yaml(), json.dumps(parents), operator, generation,
                            detail_text, _now()))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._known.add(bid)
            self._harnesses[bid] = h
            return bid

    def _has_harness(self, bid: str) -> bool:
        if bid in self._known:
            return True
        if self._db.execute("SELECT 1 FROM harnesses WHERE behaviour_id = ?", (bid,)).fetchone():
            self._known.add(bid)
            return True
        return False

    def _resolve(self, ref: str) -> str:
        """The behaviour id `ref` names: itself, or the one id it is a unique prefix (>= 6 digits) of."""
        if self._has_harness(ref):
            return ref
        if len(ref) >= _MIN_PREFIX and _HEX.match(ref):
            hits = [r[0] for r in self._db.execute(
                "SELECT behaviour_id FROM harnesses WHERE substr(behaviour_id, 1, ?) = ? ORDER BY seq LIMIT 3",
                (len(ref), ref))]
            if len(hits) == 1:
                return hits[0]
            if hits:
                raise HarnevoError(f"harness prefix {ref!r} is ambiguous ({', '.join(hits)}, ...); give more digits")
        raise HarnevoError(f"no harness {ref!r} in {self.path}")

    def harness(self, behaviour_id: str) -> Harness:
        with self._lock:
            bid = self._resolve(behaviour_id)
            if bid not in self._harnesses:
                text = self._db.execute("SELECT yaml FROM harnesses WHERE behaviour_id = ?", (bid,)).fetchone()[0]
                self._harnesses[bid] = Harness.from_yaml(text, source=f"{self.path} harness {bid}")
            return self._harnesses[bid]

    def harness_rows(self) -> list[dict]:
        """Every harness with its lineage fields (no YAML: `harness()` gives the value), in creation order."""
        with self._lock:
            rows = self._db.execute("SELECT seq, behaviour_id, harness_id, name, parents, operator, generation, "
                                    "detail, created FROM harnesses ORDER BY seq").fetchall()
        return [_harness_row(r) for r in rows]

    def lineage(self, behaviour_id: str) -> list[dict]:
        """The harness and its ancestors back to a seed, following the first parent, oldest first."""
        with self._lock:
            bid = self._resolve(behaviour_id)
            chain: list[dict] = []
            seen: set[str] = set()
            while bid is not None and bid not in seen:
                seen.add(bid)
                row = self._db.execute("SELECT seq, behaviour_id, harness_id, name, parents, operator, generation, "
                                       "detail, created FROM harnesses WHERE behaviour_id = ?", (bid,)).fetchone()
                if row is None:
                    raise HarnevoError(f"{self.path}: harness {bid} (an ancestor) is missing; the store is damaged")
                chain.append(_harness_row(row))
                bid = chain[-1]["parents"][0] if chain[-1]["parents"] else None
        return chain[::-1]

    # --- episodes -------------------------------------------------------------------------------------
    def record_episode(self, traj: Trajectory, *, model: str) -> None:
        """Store one finished episode and its trajectory, committed before returning. A key holding an
        `infra_error` record is replaced; one holding an `ok` record is left as it was."""
        bid = traj.behaviour_id
        if not bid:
            raise HarnevoError(f"record_episode: trajectory {traj.key!r} has no behaviour id")
        if traj.status not in STATUSES:
            raise HarnevoError(f"record_episode: trajectory {traj.key!r} has unknown status {traj.status!r}")
        key = (bid, model, traj.split, traj.game, traj.sample)
        with self._lock:
            db = self._db
            if not self._has_harness(bid):
                raise HarnevoError(f"record_episode: harness {bid} is not in the store; add_harness it first")
            db.execute("BEGIN IMMEDIATE")
            try:
                old = db.execute("SELECT status, trajectory FROM evaluations WHERE behaviour_id = ? AND model = ? "
                                 "AND split = ? AND game = ? AND sample = ?", key).fetchone()
                if old is not None and old[0] == OK:
                    db.execute("ROLLBACK")
                    return
                data = pack(traj, self._blobs)
                tid = db.execute("INSERT INTO trajectories (codec, data) VALUES (?, ?)",
                                 (CODEC_DEFLATE, data)).lastrowid
                values = (traj.status, int(traj.success), traj.steps, traj.env_actions, traj.meta_actions,
                          traj.invalid_replies, traj.prompt_tokens, traj.completion_tokens, traj.cost_usd,
                          traj.spent_usd, traj.reason, traj.family,
                          json.dumps(traj.bank_edits, ensure_ascii=False, separators=(",", ":")),
                          traj.bank_seen, traj.wall_seconds, traj.harness_id, tid, _now())
                if old is None:
                    db.execute(f"INSERT INTO evaluations (behaviour_id, model, split, game, sample, "
                               f"{', '.join(_EPISODE_COLUMNS)}, trajectory, recorded) VALUES "
                               f"({', '.join('?' * (len(key) + len(values)))})", key + values)
                else:
                    db.execute(f"UPDATE evaluations SET {', '.join(c + ' = ?' for c in _EPISODE_COLUMNS)}, "
                               f"trajectory = ?, recorded = ? WHERE behaviour_id = ? AND model = ? AND split = ? "
                               f"AND game = ? AND sample = ?", values + key)
                    db.execute("DELETE FROM trajectories WHERE id = ?", (old[1],))
                paid = [t for t in traj.turns if not t.cached]
                db.execute("UPDATE spend SET usd = usd + ?, prompt_tokens = prompt_tokens + ?, "
                           "completion_tokens = completion_tokens + ?, episodes = episodes + 1",
                           (traj.spent_usd, sum(t.prompt_tokens for t in paid), sum(t.completion_tokens for t in paid)))
                db.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                self._blobs.rollback()
                raise
            self._blobs.commit()

    def episodes(self, behaviour_id: str, model: str) -> dict[tuple[str, str, int], EpisodeRow]:
        """Every recorded episode of this harness and model, ok and infra_error, by (split, game, sample)."""
        with self._lock:
            rows = self._db.execute(f"SELECT behaviour_id, model, split, game, sample, {', '.join(_EPISODE_COLUMNS)} "
                                    f"FROM evaluations WHERE behaviour_id = ? AND model = ?",
                                    (behaviour_id, model)).fetchall()
        out = {}
        for r in rows:
            row = EpisodeRow(*r[:6], bool(r[6]), *r[7:17], json.loads(r[17]), *r[18:])
            out[(row.split, row.game, row.sample)] = row
        return out

    def trajectory(self, behaviour_id: str, model: str, split: str, game: str, sample: int) -> Trajectory:
        where = f"{self.path} episode {behaviour_id}|{model}|{split}|{game}|{sample}"
        with self._lock:
            row = self._db.execute("SELECT t.codec, t.data FROM evaluations e JOIN trajectories t "
                                   "ON t.id = e.trajectory WHERE e.behaviour_id = ? AND e.model = ? AND e.split = ? "
                                   "AND e.game = ? AND e.sample = ?",
                                   (behaviour_id, model, split, game, sample)).fetchone()
            if row is None:
                raise HarnevoError(f"no episode {behaviour_id}|{model}|{split}|{game}|{sample} in {self.path}")
            return unpack(row[0], row[1], self._blobs, where=where)

    def episode_count(self, *, status: str | None = None) -> int:
        if status is not None and status not in STATUSES:
            raise HarnevoError(f"episode_count: status is one of {', '.join(STATUSES)}, not {status!r}")
        with self._lock:
            if status is None:
                return self._db.execute("SELECT count(*) FROM evaluations").fetchone()[0]
            return self._db.execute("SELECT count(*) FROM evaluations WHERE status = ?", (status,)).fetchone()[0]

    def spend(self) -> dict:
        """What the recorded episodes paid (cache hits free), infra_error records since replaced included:
        usd, prompt_tokens, completion_tokens, tokens (their sum), episodes (records that paid)."""
        with self._lock:
            usd, pt, ct, n = self._db.execute(
                "SELECT usd, prompt_tokens, completion_tokens, episodes FROM spend").fetchone()
        return {"usd": usd, "prompt_tokens": pt, "completion_tokens": ct, "tokens": pt + ct, "episodes": n}

    # --- generations -----------------------------------------------------------------------------------
    def save_generation(self, gen: int, *, population: list[str], front: list[str], rng_state: object,
                        stats: dict) -> None:
        """Record generation `gen` in one transaction (saving a generation again replaces it). Every
        behaviour id named must be recorded; `rng_state` must be JSON (see `rng_state_to_json`)."""
        if not isinstance(gen, int) or gen < 0:
            raise HarnevoError(f"save_generation: the generation is an int >= 0, not {gen!r}")
        for name, ids in (("population", population), ("front", front)):
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise HarnevoError(f"save_generation: {name} is a list of behaviour ids")
        texts = [_canonical(v, what) for v, what in ((population, "population"), (front, "front"),
                                                      (rng_state, "rng_state (use rng_state_to_json)"),
                                                      (stats, "stats"))]
        with self._lock:
            db = self._db
            missing = [i for i in population + front if not self._has_harness(i)]
            if missing:
                raise HarnevoError(f"save_generation {gen}: harness {missing[0]} is not in the store")
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT OR REPLACE INTO generations (generation, population, front, rng_state, stats, time) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (gen, *texts, _now()))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def generations(self) -> list[dict]:
        """Every saved generation, oldest first: generation, population, front, rng_state, stats, time."""
        with self._lock:
            rows = self._db.execute("SELECT generation, population, front, rng_state, stats, time FROM generations "
                                    "ORDER BY generation").fetchall()
        return [_generation_row(r) for r in rows]

    def last_generation(self) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT generation, population, front, rng_state, stats, time FROM generations "
                                   "ORDER BY generation DESC LIMIT 1").fetchone()
        return None if row is None else _generation_row(row)


# --- helpers -------------------------------------------------------------------------------------------
def _canonical(value: object, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise HarnevoError(f"the {what} must be JSON-serialisable: {_one_line(e)}") from None


def _harness_row(r: tuple) -> dict:
    seq, bid, hid, name, parents, operator, generation, detail, created = r
    return {"seq": seq, "behaviour_id": bid, "harness_id": hid, "name": name, "parents": json.loads(parents),
            "operator": operator, "generation": generation, "detail": json.loads(detail), "created": created}


def _generation_row(r: tuple) -> dict:
    gen, population, front, rng_state, stats, time = r
    return {"generation": gen, "population": json.loads(population), "front": json.loads(front),
            "rng_state": json.loads(rng_state), "stats": json.loads(stats), "time": time}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _one_line(e: object) -> str:
    return " ".join(str(e).split())


def _fsync_dir(path: Path) -> None:
    with suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
