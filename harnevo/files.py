"""Where harnevo keeps its own files, how it writes them safely, and how one folder gets one writer."""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import suppress
from pathlib import Path

from harnevo.errors import HarnevoError


def cache_root() -> Path:
    """harnevo's cache folder (generated games, the reply cache): $HARNEVO_CACHE or ~/.cache/harnevo."""
    return Path(os.environ.get("HARNEVO_CACHE", Path.home() / ".cache" / "harnevo"))


def atomic_write(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` through a temp file of its own (unique name, same
    folder) and os.replace: readers see the old or the new file, and two writers never share a temp file.
    `mode` sets the file's permissions (default: the temp file's, owner-only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


_HELD: dict[str, list] = {}  # lock file -> [fd, holders]: a process may take its own lock again


class FolderLock:
    """An exclusive lock on a results or run folder (`flock` on `<folder>/.lock`), held while a process
    writes there. The kernel drops it when the process dies, SIGKILL included, so a killed run never
    leaves a stale lock. A second writer gets a one-line HarnevoError (the CLI exits 2). Within one
    process the lock is re-entrant (the CLI takes it before the slow setup, the evaluator again)."""

    def __init__(self, folder: str | os.PathLike, what: str = "folder"):
        self.folder = Path(folder)
        self.what = what
        self._key: str | None = None

    def acquire(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        key = str((self.folder / ".lock").resolve())
        if self._key is not None:
            return self
        if key in _HELD:
            _HELD[key][1] += 1
            self._key = key
            return self
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HarnevoError(f"{self.folder} is in use by another harnevo process (its {self.what} is locked); "
                               f"wait for it to finish or choose another folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _HELD[key] = [fd, 1]
        self._key = key
        return self

    def release(self) -> None:
        if self._key is None:
            return
        held = _HELD[self._key]
        held[1] -= 1
        if held[1] == 0:
            del _HELD[self._key]
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])
        self._key = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
