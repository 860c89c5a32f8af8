"""Where harnevo keeps its own files, and how it writes them safely."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """harnevo's cache folder (generated games, the reply cache): $HARNEVO_CACHE or ~/.cache/harnevo."""
    return Path(os.environ.get("HARNEVO_CACHE", Path.home() / ".cache" / "harnevo"))


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file and os.replace: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
