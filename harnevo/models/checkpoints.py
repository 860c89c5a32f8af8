"""Local transformers checkpoints: recognising one, and fingerprinting it for the reply cache (no torch)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def checkpoint_fingerprint(path: str | os.PathLike[str]) -> str:
    """A short hash of the checkpoint's file names, sizes and mtimes: changes when it is retrained."""
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]
