"""The ExperienceBank: lessons that persist across episodes, stored as one JSON file beside the run.

Edits are add / update / merge / delete; the bank holds at most `size` lessons (the least used and
oldest go first). Writes are atomic (`harnevo.files.atomic_write`)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

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
        except (OSError, json.JSONDecodeError):
            return  # a damaged bank starts empty; the run itself is not at risk
        self.lessons = [Lesson(**l) for l in data.get("lessons", [])]
        self._next_id = max([l.id for l in self.lessons], default=0) + 1

    def save(self) -> None:
        if self.path is None:
            return
        payload = {"schema": SCHEMA_VERSION, "size": self.size, "lessons": [asdict(l) for l in self.lessons]}
        atomic_write(self.path, json.dumps(payload, indent=1))
