"""What the terminal shows for a transfer run (runtime/transfer.py): for each harness, one table model x task
family (success with its 95% interval, n games), tokens and cost per model; with several harnesses, the
harness x model grid of overall success. Every table names the harness, the games, n, the interval and
marks simulated models."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harnevo.report.console import console


def _cell(c: dict[str, Any] | None) -> str:
    if c is None or not c["games"]:
        return "-"
    lo, hi = c["ci95"]
    return f"{100 * c['success']:.0f}%\n[{100 * lo:.0f}-{100 * hi:.0f}]"


def _model(e: dict[str, Any]) -> str:
    return e["model"] + (" (sim)" if e["simulated"] else "") + ("" if e["complete"] else " *")


def _caption(table: dict[str, Any]) -> str:
    return f"games: {table['split']} ({table['data_source']}); CI: {table['ci_method']}"


def model_family_table(table: dict[str, Any], harness: str) -> Table:
    entries = [e for e in table["entries"] if e["harness"] == harness]
    fams = table["families"]
    first = entries[0]
    t = Table(title=f"harness {escape(harness)} (behaviour {first['behaviour_id']}) x model: success per task family "
                    f"[95% CI]", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    t.add_column("model", overflow="fold", min_width=12)
    for f in fams:
        ns = sorted({e["per_family"][f]["games"] for e in entries if f in e["per_family"]})
        t.add_column(f"{f}\nn={'/'.join(map(str, ns)) or 0}", justify="right", no_wrap=True)
    t.add_column("all", justify="right", no_wrap=True, style="bold")
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("tokens\n/ep", justify="right", no_wrap=True)
    t.add_column("cost $", justify="right", no_wrap=True)
    for e in entries:
        a = e["all"]
        t.add_row(escape(_model(e)), *[_cell(e["per_family"].get(f)) for f in fams], _cell(a), str(a["games"]),
                  f"{e['tokens_per_episode']:.0f}", f"{e['cost_usd']:.4f}")
    return t


def grid_table(table: dict[str, Any]) -> Table:
    models = table["models"]
    entries = {(e["harness"], e["model"]): e for e in table["entries"]}
    sim = {e["model"]: e["simulated"] for e in table["entries"]}
    t = Table(title="harness x model: success over all games [95% CI]", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True)
    t.add_column("harness", overflow="fold", min_width=min(30, max(len(h) for h in table["harnesses"])))
    for m in models:
        t.add_column(escape(m + (" (sim)" if sim.get(m) else "")), justify="right", overflow="fold")
    for h in table["harnesses"]:
        cells = []
        for m in models:
            e = entries.get((h, m))
            cells.append("-" if e is None else _cell(e["all"]) + f"\nn={e['all']['games']}"
                         + ("" if e["complete"] else " *"))
        t.add_row(escape(h), *cells)
    return t


def _notes(table: dict[str, Any]) -> list[str]:
    notes = [_caption(table), f"command: {table['command']}",
             "(sim) = simulated agent (sim/...), not a language model; cost is the list price of the calls"]
    if any(not e["complete"] for e in table["entries"]):
        notes.append("* incomplete (budget or infrastructure errors): re-run the same command to finish")
    infra = sum(e["infra_errors"] for e in table["entries"])
    if infra:
        notes.append(f"{infra} infrastructure error(s) not counted in any success rate")
    return notes


def print_transfer(table: dict[str, Any], out: Console | None = None) -> None:
    out = out or console
    for h in table["harnesses"]:
        out.print(model_family_table(table, h))
    if len(table["harnesses"]) > 1:
        out.print(grid_table(table))
    for line in _notes(table):
        out.print(escape(line), soft_wrap=True, highlight=False)


def render_text(table: dict[str, Any], width: int = 120) -> str:
    """The printed table as plain text (no colour), as the terminal shows it at `width` columns."""
    c = Console(width=width, record=True, file=_Null(), color_system=None, force_terminal=False)
    print_transfer(table, c)
    return c.export_text()


class _Null:
    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass


__all__ = ["print_transfer", "render_text", "model_family_table", "grid_table"]
