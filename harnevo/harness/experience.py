"""The ExperienceBank: lessons that persist across episodes, stored as one JSON file beside the run.

Edits are add / update / merge / delete; the bank holds at most `size` lessons (the least used and
oldest go first). Writes are atomic (`harnevo.files.atomic_write`).

Episodes never write the shared bank directly: each one reads a `snapshot()` taken when it starts and
records what it would change as a list of `Edit`s (`{"op": "add", "text": ...}`, `{"op": "use", "id": n}`)
that travels inside its trajectory; the evaluator applies the edits of finished episodes with `apply()`
in a fixed order (by game, never by finishing time). So the bank is a function of the trajectories, and
a run killed between two writes loses nothing."""

from __future__ import annotations

import json
import os
import re
import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harnevo.errors import HarnevoError
from harnevo.files import atomic_write

SCHEMA_VERSION = 1


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower().rstrip("."))


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


@dataclass
class Lesson:
    id: int
    text: str
    uses: int = 0  # times recalled or confirmed
    support: int = 1  # times the same lesson was added (merged)


Edit = dict[str, Any]  # {"op": "add", "text": str} | {"op": "use", "id": int}


class ExperienceBank:
    def __init__(self, path: str | os.PathLike | None = None, size: int = 20):
        self.path = Path(path) if path else None
        self.size = size
        self.lessons: list[Lesson] = []
        self._next_id = 1
        if self.path and self.path.is_file():
            self._load()

    # --- edits --------------------------------------------------------------------------------------
    def add(self, text: str) -> Lesson | None:
        """Add a lesson; an equal one (same words) is merged instead. Returns the lesson kept."""
        text = text.strip()
        if not text or self.size == 0:
            return None
        for lesson in self.lessons:
            if _norm(lesson.text) == _norm(text):
                lesson.support += 1
                return lesson
        lesson = Lesson(id=self._next_id, text=text)
        self._next_id += 1
        self.lessons.append(lesson)
        self._evict()
        return lesson if lesson in self.lessons else None

    def update(self, lesson_id: int, text: str) -> bool:
        for lesson in self.lessons:
            if lesson.id == lesson_id:
                lesson.text = text.strip()
                return True
        return False

    def merge(self, keep_id: int, drop_id: int, text: str | None = None) -> bool:
        keep = next((l for l in self.lessons if l.id == keep_id), None)
        drop = next((l for l in self.lessons if l.id == drop_id), None)
        if keep is None or drop is None or keep is drop:
            return False
        keep.support += drop.support
        keep.uses += drop.uses
        if text:
            keep.text = text.strip()
        self.lessons.remove(drop)
        return True

    def delete(self, lesson_id: int) -> bool:
        before = len(self.lessons)
        self.lessons = [l for l in self.lessons if l.id != lesson_id]
        return len(self.lessons) < before

    def _evict(self) -> None:
        while len(self.lessons) > self.size:
            worst = min(self.lessons, key=lambda l: (l.support + l.uses, l.id))
            self.lessons.remove(worst)

    def apply(self, edits: list[Edit]) -> None:
        """Replay an episode's recorded edits (a `use` of a lesson evicted since is a no-op)."""
        for e in edits:
            if e.get("op") == "add":
                self.add(str(e.get("text", "")))
            elif e.get("op") == "use":
                for lesson in self.lessons:
                    if lesson.id == e.get("id"):
                        lesson.uses += 1

    def snapshot(self) -> "ExperienceBank":
        """A detached copy (no file): what one episode reads while it plays."""
        other = ExperienceBank(None, size=self.size)
        other.lessons = copy.deepcopy(self.lessons)
        other._next_id = self._next_id
        return other

    def resized(self, size: int) -> "ExperienceBank":
        """This bank holding at most `size` lessons (the weakest go first), e.g. for another harness."""
        self.size = size
        self._evict()
        return self

    def fingerprint(self) -> str:
        """A short hash of the lessons (ids, texts, counts): equal banks, equal fingerprints."""
        import hashlib

        blob = json.dumps([asdict(l) for l in self.lessons], sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    # --- reading ------------------------------------------------------------------------------------
    def recall(self, query: str = "", k: int = 5, *, mark_used: bool = True) -> list[Lesson]:
        """The k lessons sharing most words with `query` (best supported first on ties)."""
        q = _words(query)
        ranked = sorted(self.lessons, key=lambda l: (-len(q & _words(l.text)), -(l.support + l.uses), l.id))
        if q:
            ranked = [l for l in ranked if q & _words(l.text)] or ranked
        hits = ranked[:k]
        if mark_used:
            for lesson in hits:
                lesson.uses += 1
        return hits

    @staticmethod
    def render(lessons: list[Lesson]) -> str:
        return "\n".join(f"- {l.text}" for l in lessons) if lessons else "- (no lessons yet)"

    # --- persistence --------------------------------------------------------------------------------
    def _load(self) -> None:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            lessons = [Lesson(**l) for l in data.get("lessons", [])]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, AttributeError) as e:
            raise HarnevoError(f"{self.path}: not a readable experience bank ({type(e).__name__}); "
                               f"fix or remove the file") from None
        self.lessons = lessons
        self._next_id = max([l.id for l in self.lessons], default=0) + 1

    def to_json(self) -> str:
        payload = {"schema": SCHEMA_VERSION, "size": self.size, "lessons": [asdict(l) for l in self.lessons]}
        return json.dumps(payload, indent=1)

    def save(self, path: str | os.PathLike | None = None) -> None:
        target = Path(path) if path is not None else self.path
        if target is None:
            return
        atomic_write(target, self.to_json())
