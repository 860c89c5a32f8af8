"""Which Experience bank each episode reads, and the order in which episodes' lessons enter it.

Episodes of one evaluation are numbered in a fixed order (the sorted games, then samples). Episode `i`
reads the bank as it was after the edits of episodes `0 .. i - lag` were applied, in that order, to the
starting bank; it waits until those have finished. So what an episode sees is a function of the game
order and `lag` alone, never of how many episodes run at once or which finished first: concurrency 1
and 16 give the same bank to every episode (at most `lag` episodes of a bank harness are in flight).
With `frozen`, every episode reads the starting bank and nothing is applied (held-out evaluation: lessons
learned on train, read-only on test)."""

from __future__ import annotations

import asyncio

from harnevo.harness.experience import Edit, ExperienceBank

DEFAULT_LAG = 16


class BankSchedule:
    def __init__(self, base: ExperienceBank, order: list[str], *, lag: int = DEFAULT_LAG, frozen: bool = False):
        if lag < 1:
            raise ValueError(f"experience lag must be >= 1, got {lag}")
        self.base, self.lag, self.frozen = base, lag, frozen
        self.index = {key: i for i, key in enumerate(order)}
        self.bank = base.snapshot()  # base + the edits of episodes 0 .. applied - 1
        self.applied = 0
        self._settled: dict[int, list[Edit]] = {}
        self._snaps: dict[int, ExperienceBank] = {0: base.snapshot()}
        self._needed: dict[int, int] = {}  # snapshot point -> episodes still to start that read it
        self._changed = asyncio.Event()
        self._aborted = False

    def need(self, key: str) -> None:
        """Declare that episode `key` will be played, so that its snapshot is kept: call it for every
        episode to play before settling the episodes already recorded."""
        k = self._point(self.index[key])
        self._needed[k] = self._needed.get(k, 0) + 1

    def settle(self, key: str, edits: list[Edit]) -> bool:
        """Episode `key` is finished (its edits; [] for an episode that teaches nothing). Returns True
        when the bank moved on."""
        i = self.index.get(key)
        if i is None or i < self.applied or i in self._settled:  # unknown, or settled once already
            return False
        self._settled[i] = [] if self.frozen else list(edits)
        moved = False
        while self.applied in self._settled:
            self.bank.apply(self._settled.pop(self.applied))
            self.applied += 1
            moved = True
            if self._needed.get(self.applied):
                self._snaps[self.applied] = self.bank.snapshot()
        if moved:
            self._wake()
        return moved

    async def snapshot_for(self, key: str) -> ExperienceBank | None:
        """The bank episode `key` reads (its own copy), once the episodes it depends on have finished;
        None if the evaluation was stopped meanwhile."""
        if self.frozen:
            return self.base.snapshot()
        k = self._point(self.index[key])
        while self.applied < k:
            if self._aborted:
                return None
            await self._changed.wait()
        left = self._needed.get(k, 1) - 1
        snap = self._snaps[k] if left else self._snaps.pop(k)
        self._needed[k] = left
        return snap.snapshot()

    def abort(self) -> None:
        """Wake every waiting episode (the evaluation stopped): they return without playing."""
        self._aborted = True
        self._wake()

    def _wake(self) -> None:
        # every waiter holds the old event: set it and hand out a fresh one for the next wait
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    def _point(self, i: int) -> int:
        return max(0, i - self.lag + 1)
