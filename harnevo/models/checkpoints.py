"""Local transformers checkpoints: recognising one, and fingerprinting it for the reply cache, loading it quietly (no torch or litellm at import)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Iterator


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


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """transformers' own progress bars (loading/writing weights) off for the duration."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
