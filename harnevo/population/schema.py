"""The tables of a population store (`<run_dir>/population.sqlite`) and the checks made on opening one.

    meta          key -> value: format, schema (SCHEMA_VERSION)
    run           one row: config (JSON), config_hash, versions (JSON), created
    harnesses     seq (creation order), behaviour_id (unique: the key everyone uses), harness_id, name,
                  yaml (canonical, `Harness.to_yaml()`), parents (JSON list of behaviour ids), operator,
                  generation, detail (JSON object), created
    evaluations   (behaviour_id, model, split, game, sample) -> status, outcome, counts, tokens, costs,
                  reason, family, bank_edits (JSON), bank_seen, wall_seconds, harness_id, trajectory, recorded
    trajectories  id -> codec, data (see blobs.py)
    blobs         id -> hash, base, depth, size, data (see blobs.py)
    generations   generation -> population, front (JSON lists of behaviour ids), rng_state, stats (JSON), time
    spend         one row: usd, prompt_tokens, completion_tokens, episodes: what every record paid, an
                  infra_error record later replaced included (its calls were paid all the same)

The file carries SQLite's application id APPLICATION_ID, so another program's database is told apart
from a damaged store. Schema versions: 1 (this one). A store of a newer schema is refused, never
rewritten.
"""

from __future__ import annotations

import sqlite3

from harnevo.errors import HarnevoError

SCHEMA_VERSION = 1
FORMAT = "harnevo population store"
APPLICATION_ID = 0x68657670  # "hevp"

DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE run (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    config TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    versions TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE harnesses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    behaviour_id TEXT NOT NULL UNIQUE,
    harness_id TEXT NOT NULL,
    name TEXT NOT NULL,
    yaml TEXT NOT NULL,
    parents TEXT NOT NULL,
    operator TEXT NOT NULL,
    generation INTEGER NOT NULL,
    detail TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE blobs (
    id INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    base INTEGER REFERENCES blobs(id),
    depth INTEGER NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE trajectories (
    id INTEGER PRIMARY KEY,
    codec INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE evaluations (
    behaviour_id TEXT NOT NULL REFERENCES harnesses(behaviour_id),
    model TEXT NOT NULL,
    split TEXT NOT NULL,
    game TEXT NOT NULL,
    sample INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'infra_error')),
    success INTEGER NOT NULL,
    steps INTEGER NOT NULL,
    env_actions INTEGER NOT NULL,
    meta_actions INTEGER NOT NULL,
    invalid_replies INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    spent_usd REAL NOT NULL,
    reason TEXT NOT NULL,
    family TEXT NOT NULL,
    bank_edits TEXT NOT NULL,
    bank_seen TEXT NOT NULL,
    wall_seconds REAL NOT NULL,
    harness_id TEXT NOT NULL,
    trajectory INTEGER NOT NULL UNIQUE REFERENCES trajectories(id),
    recorded TEXT NOT NULL,
    PRIMARY KEY (behaviour_id, model, split, game, sample)
);
CREATE TABLE generations (
    generation INTEGER PRIMARY KEY,
    population TEXT NOT NULL,
    front TEXT NOT NULL,
    rng_state TEXT NOT NULL,
    stats TEXT NOT NULL,
    time TEXT NOT NULL
);
CREATE TABLE spend (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    usd REAL NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    episodes INTEGER NOT NULL
);
"""

TABLES = ("blobs", "evaluations", "generations", "harnesses", "meta", "run", "spend", "trajectories")


def initialise(conn: sqlite3.Connection) -> None:
    """Lay out an empty database as a store (inside the caller's transaction)."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    for statement in DDL.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                     [("format", FORMAT), ("schema", str(SCHEMA_VERSION))])
    conn.execute("INSERT INTO spend (id, usd, prompt_tokens, completion_tokens, episodes) VALUES (1, 0, 0, 0, 0)")


def check(conn: sqlite3.Connection, where: str) -> None:
    """Refuse, in one line, what is not a sound store of this schema: another program's database, a
    newer schema, missing tables, a failed integrity check. Reads only."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if app != APPLICATION_ID or "meta" not in tables:
        raise HarnevoError(f"{where} is an SQLite database but not a harnevo population store; it was left untouched")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    schema = meta.get("schema", "")
    if not schema.isdigit():
        raise HarnevoError(f"{where}: the store records no schema version; it is damaged (left untouched)")
    if int(schema) > SCHEMA_VERSION:
        raise HarnevoError(f"{where}: population store schema {schema} is newer than this harnevo's "
                           f"({SCHEMA_VERSION}); upgrade harnevo to open it")
    if int(schema) < SCHEMA_VERSION:  # no older schema exists yet: schema 1 is the first
        raise HarnevoError(f"{where}: population store schema {schema} is not one this harnevo reads")
    missing = [t for t in TABLES if t not in tables]
    if missing:
        raise HarnevoError(f"{where}: the store lacks table(s) {', '.join(missing)}; it is damaged (left untouched)")
    verdict = conn.execute("PRAGMA integrity_check(1)").fetchone()[0]
    if verdict != "ok":
        raise HarnevoError(f"{where} failed its integrity check ({' '.join(str(verdict).split())}); "
                           f"it was left untouched: restore a copy or start a new run folder")
    if conn.execute("SELECT (SELECT count(*) FROM run) + (SELECT count(*) FROM spend)").fetchone()[0] != 2:
        raise HarnevoError(f"{where}: the store has no run record; it is damaged (left untouched)")
