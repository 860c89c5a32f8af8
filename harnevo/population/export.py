"""Harnesses out of a population store: one as a YAML file, two as a unified diff of their YAML."""

from __future__ import annotations

import difflib
from pathlib import Path

from harnevo.files import atomic_write
from harnevo.population.store import Store


def export_harness(store: Store, behaviour_id: str, out_path: Path) -> Path:
    """Write the canonical YAML of a harness (a unique prefix of its behaviour id will do) to `out_path`
    atomically; `harnevo apply --harness out_path` then loads the same harness. Returns the path."""
    out_path = Path(out_path)
    atomic_write(out_path, store.harness(behaviour_id).to_yaml())
    return out_path


def diff(store: Store, a: str, b: str) -> str:
    """A unified diff from harness `a`'s YAML to harness `b`'s ("" when they are the same text)."""
    ha, hb = store.harness(a), store.harness(b)
    lines = difflib.unified_diff(ha.to_yaml().splitlines(keepends=True), hb.to_yaml().splitlines(keepends=True),
                                 fromfile=f"{ha.behaviour_id} ({ha.name})", tofile=f"{hb.behaviour_id} ({hb.name})")
    return "".join(lines)
