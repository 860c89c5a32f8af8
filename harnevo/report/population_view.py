"""`harnevo population list`: every harness of a run with how it was made and how it did."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harnevo.report.evolve_view import console


def print_population(store) -> None:
    last = store.last_generation() or {}
    stats = (last.get("stats") or {}).get("candidates", {})
    alive, front = set(last.get("population", [])), set(last.get("front", []))
    v = store.versions()
    sim = " (simulated)" if v.get("simulated") else ""
    table = Table(title=f"{store.path}: model {v.get('model')}{sim}, {v.get('split')} games; "
                        f"generation {last.get('generation', '-')}; success with Wilson 95% CI over games played",
                  title_justify="left")
    table.add_column("behaviour id", no_wrap=True, min_width=16)
    table.add_column("name", max_width=22, overflow="ellipsis", no_wrap=True)
    for col in ("gen", "made by", "parents", "success [CI]", "games", "tokens/ep", "state"):
        table.add_column(col, overflow="fold")
    for r in store.harness_rows():
        bid = r["behaviour_id"]
        s = stats.get(bid)
        score = games = tokens = ""
        if s:
            lo, hi = s["ci95"]
            score = f"{100 * s['success']:.1f}% [{100 * lo:.0f}-{100 * hi:.0f}]"
            games = str(s["games"]) + (" (below the floor)" if s.get("below_floor") else "" if s["complete"]
                                       else " (raced out)" if s["stopped_early"] else "")
            tokens = f"{s['tokens_per_episode']:.0f}"
        state = "front" if bid in front else "alive" if bid in alive else ""
        table.add_row(bid, escape(r["name"]), str(r["generation"]), escape(r["operator"]),
                      ",".join(p[:8] for p in r["parents"]) or "-", score, games, tokens, state)
    console.print(table)
