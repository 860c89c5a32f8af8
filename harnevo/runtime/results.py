"""The results folder of one evaluation (`apply --out DIR`): what is evaluated, every finished episode,
the Experience bank derived from them, the spend so far, and a lock.

    run.json            identity: harness (id and behaviour id), model, split, header fields
    harness.yaml        the harness evaluated
    trajectories.jsonl  one finished episode a line, appended and fsynced as each finishes (the truth)
    experience.json     the bank after every recorded episode's edits, in game order (derived; rebuilt)
    experience_base.json the bank the evaluation started from (`--bank`), when one was given
    budget.json         spend of every invocation into this folder, so a budget continues across them
    summary.json        the aggregates
    .lock               held while a process writes here (a second writer gets a one-line error)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.files import FolderLock, atomic_write
from harnevo.runtime.trajectory import SchemaError, Trajectory

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
RUN = "run.json"
EXPERIENCE = "experience.json"
EXPERIENCE_BASE = "experience_base.json"
BUDGET = "budget.json"


class ResultsDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.trajectories = self.path / TRAJECTORIES
        self._lock = FolderLock(self.path, "results folder")
        self._old_ids: tuple[str, str] | None = None  # (full id, behaviour id) when v1 keys need rewriting

    # --- ownership -------------------------------------------------------------------------------------
    def lock(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise HarnevoError(f"--out {self.path} is a file, not a folder")
        self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    def claim(self, identity: dict[str, Any], harness_yaml: str) -> None:
        """Create the folder, or check that it holds the same evaluation (same behaviour, model, split).
        A folder of an older harnevo (no behaviour id) is accepted only when its harness id matches."""
        run_file = self.path / RUN
        if run_file.is_file():
            try:
                old = json.loads(run_file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise HarnevoError(f"{run_file} is damaged; remove it only if this folder is not another "
                                   f"evaluation's") from None
            if "behaviour_id" not in old and old.get("harness_id") is not None:
                if old["harness_id"] != identity["harness_id"]:
                    raise HarnevoError(f"{self.path} holds an evaluation of harness {old['harness_id']} (an older "
                                       f"harnevo's id), not {identity['harness_id']}; choose another --out")
                self._old_ids = (old["harness_id"], identity["behaviour_id"])
            for k in ("behaviour_id", "model", "split"):
                if old.get(k) not in (None, identity[k]):
                    raise HarnevoError(f"{self.path} holds an evaluation with {k}={old.get(k)!r}, not "
                                       f"{identity[k]!r}; choose another --out")
        atomic_write(run_file, json.dumps(identity, indent=2))
        atomic_write(self.path / "harness.yaml", harness_yaml)

    # --- episodes ----------------------------------------------------------------------------------------
    def load(self) -> dict[str, Trajectory]:
        """Recorded episodes by key (a later line for a key replaces an earlier one: an infra_error
        replayed). A torn last line (killed mid-write) is cut off; any other unreadable line refuses
        the folder with one line, since dropping it would replay and double-pay that episode."""
        if not self.trajectories.is_file():
            return {}
        raw = self.trajectories.read_bytes()
        if raw and not raw.endswith(b"\n"):
            cut = raw.rfind(b"\n") + 1
            with open(self.trajectories, "r+b") as f:
                f.truncate(cut)
            raw = raw[:cut]
        done: dict[str, Trajectory] = {}
        for n, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                t = Trajectory.from_dict(json.loads(line.decode("utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise HarnevoError(f"{self.trajectories} line {n} is not valid JSON; the folder is damaged "
                                   f"(move the line out to resume)") from None
            except SchemaError as e:
                raise HarnevoError(f"{self.trajectories} line {n}: {e}") from None
            if self._old_ids and t.key.startswith(self._old_ids[0] + "|"):
                t.key = self._old_ids[1] + t.key[len(self._old_ids[0]):]
                t.behaviour_id = self._old_ids[1]
            done[t.key] = t
        return done

    def append(self, traj: Trajectory) -> None:
        """One episode, with its Experience edits, in one fsynced line: nothing else to persist with it."""
        line = json.dumps(traj.to_dict(), ensure_ascii=False) + "\n"
        with open(self.trajectories, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    # --- derived files -------------------------------------------------------------------------------
    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write(self.path / SUMMARY, json.dumps(summary, indent=2))

    def write_text(self, name: str, text: str) -> None:
        atomic_write(self.path / name, text)

    def read_json(self, name: str) -> Any | None:
        f = self.path / name
        if not f.is_file():
            return None
        try:
            return json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise HarnevoError(f"{f} is damaged; fix or remove it") from None
