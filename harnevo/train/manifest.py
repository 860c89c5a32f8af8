"""The manifest every stage writes next to its output (`manifest.json`): what it read, what it wrote.

Written atomically (temp file + os.replace). `stage` names the stage; `inputs` its inputs (harness id,
teacher, base checkpoint, dataset folder with that folder's own manifest digest); `complete` is True only
once the stage finished, so a resumed stage knows whether to go on."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError

MANIFEST = "manifest.json"
SCHEMA = 1


def write_manifest(folder: Path, stage: str, **fields: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"schema": SCHEMA, "stage": stage, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **fields}
    path = folder / MANIFEST
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise HarnevoError(f"{path}: unreadable manifest ({e}); remove it to start the stage again") from None


def digest(folder: Path) -> str:
    """A short hash of a stage output's manifest (names the exact input a later stage read)."""
    path = Path(folder) / MANIFEST
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else ""


def check_same_inputs(folder: Path, stage: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    """The folder's manifest when it was written by the same stage with the same inputs; None for a new
    folder; a HarnevoError when the folder belongs to another stage or other inputs."""
    m = read_manifest(folder)
    if m is None:
        return None
    if m.get("stage") != stage:
        raise HarnevoError(f"{folder} holds the output of `train {m.get('stage')}`, not `train {stage}`; "
                           f"choose another --out")
    if m.get("inputs") != json.loads(json.dumps(inputs, default=str)):
        diff = sorted(k for k in set(m.get("inputs", {})) | set(inputs)
                      if m.get("inputs", {}).get(k) != json.loads(json.dumps(inputs.get(k), default=str)))
        raise HarnevoError(f"{folder} was written with other inputs ({', '.join(diff)}); choose another --out "
                           f"or remove it")
    return m


def finished_before(folder: Path, stage: str, inputs: dict[str, Any], log=print) -> dict[str, Any] | None:
    """The folder's manifest when `stage` already finished there with the same inputs (then nothing is redone
    or rewritten: a later stage records this manifest's digest as its input); None when there is work to do.
    A folder of another stage or of other inputs raises (check_same_inputs)."""
    prior = check_same_inputs(folder, stage, inputs)
    if prior is not None and prior.get("complete"):
        log(f"{stage}: {folder} is complete (same inputs); nothing to do")
        return prior
    return None


__all__ = ["MANIFEST", "check_same_inputs", "digest", "finished_before", "read_manifest", "write_manifest"]
