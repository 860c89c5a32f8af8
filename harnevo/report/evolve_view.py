"""What `harnevo evolve` shows while it runs and when it ends.

On a TTY: a rich live panel (generation, candidates and episodes done, racing savings, best success with its
CI, front size, spend against the budget, ETA). Without a TTY: one plain line per generation. At the end:
the front as a table (success with CI, tokens per episode, meta-actions, behaviour id, how it was made),
the paths of best.yaml and the store, and how to apply the best harness. Every figure names the model,
the games, n and whether the model was simulated."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(stderr=False, width=None if sys.stdout.isatty() else 120)


class EvolveView:
    def __init__(self, cfg, *, total_games: int, model, source: str):
        self.cfg, self.total_games, self.source = cfg, total_games, source
        self.model_name, self.simulated = model.name, model.simulated
        self.tty = sys.stdout.isatty()
        self.generation = 0
        self.candidates = 0
        self.episodes_now = 0
        self.wins_now = 0
        self.last: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self._live = None

    # --- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> "EvolveView":
        sim = " (simulated)" if self.simulated else ""
        knob, limit = self.cfg.budget_knob
        console.print(escape(f"evolve: {self.cfg.search} search, population {self.cfg.population}, "
                             f"objectives {','.join(self.cfg.objectives)}, model {self.model_name}{sim}, "
                             f"{self.total_games} games ({self.source}), seed {self.cfg.seed}, "
                             f"budget {knob}={limit}, racing {'on' if self.cfg.racing else 'off'}"), soft_wrap=True)
        if self.tty:
            from rich.live import Live

            self._live = Live(self._panel(), console=console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    # --- events ------------------------------------------------------------------------------------------
    def episode(self, traj: Any) -> None:
        self.episodes_now += 1
        self.wins_now += int(traj.success)
        if self._live is not None:
            self._live.update(self._panel())

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "generation_start":
            self.generation, self.candidates = data["generation"], data["candidates"]
        elif kind == "generation_end":
            self.last = data
            if not self.tty:
                console.print(escape(self._line()), soft_wrap=True)
        elif kind == "resumed":
            console.print(f"resumed after generation {data['generation']} (episodes in the store are not replayed)")
        elif kind == "budget":
            console.print(f"[yellow]budget reached during generation {data['generation']}[/]: stopping")
        if self._live is not None:
            self._live.update(self._panel())

    # --- rendering ---------------------------------------------------------------------------------------
    def _line(self) -> str:
        d = self.last
        if not d:
            return f"generation {self.generation}: {self.candidates} candidates, {self.episodes_now} episodes played"
        s = d["best_stats"]
        lo, hi = s["ci95"]
        knob, limit = self.cfg.budget_knob
        elapsed = time.perf_counter() - self.t0
        eta = ""
        if knob == "generations" and d["generation"] > 0:
            per = elapsed / max(1, d["generation"])
            eta = f", ETA {max(0.0, per * (limit - d['generation'])):.0f}s"
        return (f"generation {d['generation']}: {d['episodes']} episodes in the store ({self.episodes_now} played now, "
                f"{d['saved_by_racing']} saved by racing); best {d['best']} success {100 * s['success']:.1f}% "
                f"[{100 * lo:.0f}-{100 * hi:.0f}] over {s['games']} games, {s['tokens_per_episode']:.0f} tokens/episode; "
                f"front {len(d['front'])}; {elapsed:.0f}s{eta}")

    def _panel(self):
        from rich.panel import Panel

        return Panel(escape(f"generation {self.generation} ({self.candidates} candidates), episodes played now "
                            f"{self.episodes_now} ({self.wins_now} won)\n" + (self._line() if self.last else "")),
                     title="harnevo evolve", expand=False)

    def final(self, summary: dict[str, Any]) -> None:
        sim = " (simulated)" if summary["simulated"] else ""
        table = Table(title=f"front after generation {summary['generations']}: model {summary['model']}{sim}, "
                            f"{self.total_games} train games, success with Wilson 95% CI over games",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("behaviour id", no_wrap=True, min_width=18)
        narrow = console.width < 110  # the name is the seed's plus the id: dropped where space is short
        if not narrow:
            table.add_column("name", max_width=22, overflow="ellipsis", no_wrap=True)
        table.add_column("success [CI]", no_wrap=True, min_width=15)
        for col in ("games", "tokens/ep", "meta/ep"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("made by", overflow="fold", min_width=8)
        table.add_column("gen", justify="right", no_wrap=True, min_width=3)
        for r in summary["front"]:
            lo, hi = r["ci95"]
            mark = " *" if r["behaviour_id"] == summary["best"] else ""
            table.add_row(r["behaviour_id"] + mark, *([] if narrow else [escape(r["name"])]),
                          f"{100 * r['success']:.1f}% [{100 * lo:.0f}-{100 * hi:.0f}]", str(r["games"]),
                          f"{r['tokens_per_episode']:.0f}", f"{r['meta_per_episode']:.2f}", escape(r["operator"]),
                          str(r["generation"]))
        console.print(table)
        console.print(f"* best (highest success, then fewest tokens per episode). Episodes: {summary['episodes_in_store']} "
                      f"in the store, {summary['episodes_played_now']} played now, "
                      f"{summary['episodes_saved_by_racing']} saved by racing; wall {summary['wall_seconds']:.0f}s")
        console.print(escape(f"best: {summary['best_yaml']}" + (f" (+ bank {summary['best_bank']})" if summary["best_bank"] else "")
                             + f"; store: {summary['store']}"), soft_wrap=True)
        console.print(escape(f"apply it: harnevo apply {summary['run_dir']}:best --model MODEL --split HELD_OUT --out DIR  "
                             f"(held-out games, e.g. valid_unseen; its bank is read frozen)"),
                      soft_wrap=True)
