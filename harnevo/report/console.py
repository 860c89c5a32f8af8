"""What the terminal shows: a progress bar (plain lines when not a TTY), the per-family table of an
evaluation, and the data check. Every figure names the harness, model, games and whether simulated."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harnevo.envs.games import FAMILIES

console = Console(stderr=False, width=None if sys.stdout.isatty() else 120)


def describe(summary: dict[str, Any]) -> str:
    sim = " [simulated model]" if summary.get("simulated") else ""
    bid = summary.get("behaviour_id") or summary["harness_id"]
    return (f"harness {summary['harness_name']} (behaviour {bid}) x model {summary['model']}{sim} "
            f"on {summary['games']} {summary['split']} games ({summary.get('data_source', '?')})")


class EpisodeProgress:
    """A rich progress bar on a TTY; a plain line every ~10% otherwise."""

    def __init__(self, title: str, total: int):
        self.title, self.total = title, total
        self.tty = sys.stdout.isatty()
        self._progress = None
        self._task = None
        self._wins = 0
        self._last_pct = -1

    def __enter__(self) -> "EpisodeProgress":
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[wins]}"), TimeElapsedColumn(), console=console)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.title, total=self.total, wins="")
        else:
            console.print(f"{self.title}: {self.total} episodes")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def update(self, traj: Any, done: int, total: int) -> None:
        self._wins += int(traj.success)
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total, wins=f"won {self._wins}")
            return
        pct = done * 100 // max(total, 1)
        if pct // 10 != self._last_pct // 10 or done == total:
            self._last_pct = pct
            console.print(f"  {done}/{total} episodes done ({self._wins} won in this session)")


def print_summary(summary: dict[str, Any], *, out: Path | None = None) -> None:
    console.print(escape(describe(summary)), soft_wrap=True)
    table = Table()
    table.add_column("family")
    table.add_column("games", justify="right")
    table.add_column("success", justify="right")
    for fam in FAMILIES:
        if fam in summary["per_family"]:
            f = summary["per_family"][fam]
            table.add_row(fam, str(f["games"]), f"{100 * f['success_rate']:.1f}%")
    lo, hi = summary["ci95"]
    table.add_row("all", str(summary["games"]), f"{100 * summary['success_rate']:.1f}% [{100 * lo:.0f}-{100 * hi:.0f}]",
                  style="bold")
    console.print(table)
    console.print(f"success over {summary['games']} games ({summary.get('episodes', summary['games'])} episodes), "
                  f"95% interval: {summary.get('ci_method', 'Wilson')}")
    console.print(f"mean steps {summary['mean_steps']:.1f}, meta-actions/episode {summary['meta_actions_per_episode']:.2f}, "
                  f"tokens {summary['prompt_tokens']}+{summary['completion_tokens']}, list-price cost "
                  f"${summary['cost_usd']:.4f} (spent now ${summary.get('spent_usd', 0.0):.4f}), "
                  f"cache hits {summary['cache_hits']}, retries {summary['retries']}, "
                  f"wall {summary.get('wall_seconds', 0):.1f}s")
    if summary.get("infra_errors"):
        reasons = ", ".join(f"{k} {v}" for k, v in summary.get("infra_error_reasons", {}).items())
        console.print(f"[bold red]{summary['infra_errors']} infrastructure error(s)[/] ({escape(reasons)}): not "
                      f"counted in the success rate; re-run the same command to play them again")
    if summary.get("stopped_by_budget"):
        console.print(f"[bold yellow]stopped at the budget[/]: {summary['episodes']} episodes finished")
    elif not summary.get("complete", True):
        console.print("[yellow]incomplete: re-run the same command to finish[/]")
    if out is not None:
        console.print(f"results: {out / 'summary.json'}, {out / 'trajectories.jsonl'}")


def print_data_check(data: Path | None) -> None:
    from harnevo.envs.games import HOW_TO_GET_DATA, list_splits, require_data_root, scan_split
    from harnevo.errors import DataNotFoundError

    root = require_data_root(data)
    table = Table(title=f"ALFWorld games under {root}", title_justify="left")
    table.add_column("split")
    for fam in FAMILIES:
        table.add_column(fam, justify="right")
    table.add_column("total", justify="right", style="bold")
    total_all = 0
    for split in list_splits(root):
        games = scan_split(root, split)
        counts = {f: sum(g.family == f for g in games) for f in FAMILIES}
        total_all += len(games)
        table.add_row(split, *[str(counts[f]) for f in FAMILIES], str(len(games)))
    console.print(table)
    if total_all == 0:
        raise DataNotFoundError(f"{root} holds no games; {HOW_TO_GET_DATA}")
