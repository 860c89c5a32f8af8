"""Prices and budgets. No litellm here: litellm's price map is read in litellm_model.py.

`Price` is a user-given price per million tokens (for models litellm does not know, e.g. a local
server). `Budget` is what the evaluator asks before starting an episode.

How the evaluator uses a Budget:

    budget = Budget(usd=5.0)                      # and/or tokens=...
    est = budget.estimate() or Usage(cost_usd=0.05)  # mean settled episode, or a first guess
    if budget.would_exceed(est):                  # spend + in flight + this one would pass a limit
        stop starting episodes; budget.exhausted is now True (the summary says so)
    r = budget.reserve(est)                       # counts as in flight
    ... play the episode ...
    budget.settle(r, spend_of_episode)            # the estimate leaves, the actual spend enters

A cache hit costs nothing: count a reply's spend with `spend_of(reply)`, which is zero for cached
replies (their Usage still shows the original tokens, for the record).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from harnevo.models.base import Reply, Usage


@dataclass(frozen=True)
class Price:
    """USD per one million prompt / completion tokens."""

    prompt_per_m: float
    completion_per_m: float

    def __post_init__(self) -> None:
        if self.prompt_per_m < 0 or self.completion_per_m < 0:
            raise ValueError(f"prices must be >= 0, got {self.prompt_per_m}, {self.completion_per_m}")

    @classmethod
    def of(cls, price: "Price | tuple[float, float] | None") -> "Price | None":
        if price is None or isinstance(price, Price):
            return price
        prompt, completion = price
        return cls(float(prompt), float(completion))

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_per_m + completion_tokens * self.completion_per_m) / 1_000_000


def spend_of(reply: Reply) -> Usage:
    """What a reply cost now: nothing for a cache hit, its usage otherwise."""
    return Usage() if reply.cached else Usage(reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.cost_usd)


def _tokens(u: Usage) -> int:
    return u.prompt_tokens + u.completion_tokens


@dataclass(frozen=True)
class Reservation:
    id: int
    estimate: Usage


class Budget:
    """Spend limits in USD and/or tokens (None = no limit on that axis). Thread-safe.

    spent:     settled actual spend (plus anything `add`ed directly)
    in flight: the estimates of reservations not yet settled
    A limit is passed when spent + in flight + the estimate asked about is strictly greater than it.
    """

    def __init__(self, usd: float | None = None, tokens: int | None = None) -> None:
        if usd is not None and usd < 0:
            raise ValueError(f"budget usd must be >= 0, got {usd}")
        if tokens is not None and tokens < 0:
            raise ValueError(f"budget tokens must be >= 0, got {tokens}")
        self.limit_usd = usd
        self.limit_tokens = tokens
        self.spent = Usage()
        self.exhausted = False  # set once would_exceed said yes: the run stopped for the budget
        self._open: dict[int, Usage] = {}
        self._ids = itertools.count()
        self._settled_n = 0
        self._settled_sum = Usage()
        self._lock = threading.Lock()

    @property
    def limited(self) -> bool:
        return self.limit_usd is not None or self.limit_tokens is not None

    @property
    def in_flight(self) -> Usage:
        with self._lock:
            return self._in_flight()

    def _in_flight(self) -> Usage:
        total = Usage()
        for u in self._open.values():
            total += u
        return total

    def would_exceed(self, estimate: Usage | None = None) -> bool:
        """Would spent + in flight + `estimate` pass a limit, or are spent + in flight already at it?
        A yes marks the budget exhausted."""
        est = estimate or Usage()
        with self._lock:
            fl = self._in_flight()
            usd = self.spent.cost_usd + fl.cost_usd
            tok = _tokens(self.spent) + _tokens(fl)
            over = _passes(usd, est.cost_usd, self.limit_usd) or _passes(tok, _tokens(est), self.limit_tokens)
            if over:
                self.exhausted = True
            return over

    def reserve(self, estimate: Usage | None = None) -> Reservation:
        est = Usage(*(_copy(estimate or Usage())))
        with self._lock:
            rid = next(self._ids)
            self._open[rid] = est
        return Reservation(rid, est)

    def settle(self, reservation: Reservation, actual: Usage) -> None:
        """Replace the reservation's estimate by what was actually spent (settling twice is an error)."""
        with self._lock:
            if reservation.id not in self._open:
                raise ValueError(f"reservation {reservation.id} is not open")
            del self._open[reservation.id]
            self.spent += Usage(*_copy(actual))
            self._settled_n += 1
            self._settled_sum += Usage(*_copy(actual))

    def release(self, reservation: Reservation) -> None:
        """Drop a reservation that spent nothing (an episode that never started)."""
        with self._lock:
            self._open.pop(reservation.id, None)

    def add(self, actual: Usage) -> None:
        """Count spend that had no reservation."""
        with self._lock:
            self.spent += Usage(*_copy(actual))

    def estimate(self) -> Usage | None:
        """The mean settled spend per reservation, or None before any settled."""
        with self._lock:
            if not self._settled_n:
                return None
            n, s = self._settled_n, self._settled_sum
            return Usage(-(-s.prompt_tokens // n), -(-s.completion_tokens // n), s.cost_usd / n)

    def snapshot(self) -> dict:
        """A JSON-ready view for summaries."""
        with self._lock:
            fl = self._in_flight()
            return {
                "limit_usd": self.limit_usd,
                "limit_tokens": self.limit_tokens,
                "spent_usd": self.spent.cost_usd,
                "spent_tokens": _tokens(self.spent),
                "in_flight_usd": fl.cost_usd,
                "in_flight_tokens": _tokens(fl),
                "exhausted": self.exhausted,
            }


def _passes(committed: float, estimate: float, limit: float | None) -> bool:
    return limit is not None and (committed >= limit or committed + estimate > limit)


def _copy(u: Usage) -> tuple[int, int, float]:
    return (u.prompt_tokens, u.completion_tokens, u.cost_usd)
