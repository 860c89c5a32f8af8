"""The report's plots as PNG bytes (matplotlib, Agg). Each function takes the data that run_report.gather or
transfer.py made and returns one PNG; nothing is shown on a screen and nothing global is changed.

The Agg backend is chosen before pyplot could be imported, and the figures are made with matplotlib's object
API (`Figure` + `FigureCanvasAgg`), never pyplot's global state: the plots draw the same in a headless
process, in threads and in tests. Every plot has a title naming the model (and whether it is simulated)
and the games, labelled axes, a legend, and 95% intervals (Wilson, over games) as bands or error bars.
Same data, same bytes (no timestamps in the PNG metadata)."""

from __future__ import annotations

import io
import sys
from typing import Any

import matplotlib

if "matplotlib.pyplot" not in sys.modules:  # headless: Agg, set before anything imports pyplot (a session that
    matplotlib.use("Agg")                  # already has pyplot keeps its backend; these figures never use it)
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter  # noqa: E402

BLUE, ORANGE, GREEN, RED, GREY, PURPLE = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#8c8c8c", "#9467bd"
PALETTE = (BLUE, ORANGE, GREEN, PURPLE, "#8c564b", "#e377c2", "#17becf", "#bcbd22", GREY)  # red marks the best
DPI = 100


def _figure(w: float = 8.0, h: float = 4.6) -> Figure:
    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _model_label(model: str, simulated: bool) -> str:
    return f"{model} (simulated)" if simulated else model


def _pct(ax, axis: str = "y") -> None:
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(1.0, decimals=0))


def _headroom(ax) -> None:
    """A 0-100% axis with a little room above the error bars."""
    ax.set_ylim(0, 1.06)
    _pct(ax)


def _legend_below(ax, n: int) -> None:
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(2, n), fontsize=8, frameon=False)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color=GREY, fontsize=11)


def _short(bid: str | None) -> str:
    return (bid or "")[:8]


# --- the run report ---------------------------------------------------------------------------------------------
def run_plots(data: dict[str, Any]) -> dict[str, bytes]:
    """name -> PNG of the run report, in the order the page shows them."""
    return {"success_per_generation": success_per_generation(data), "front": front(data),
            "families": families(data), "episodes": episodes(data)}


def _subtitle(data: dict[str, Any]) -> str:
    return (f"model {_model_label(data['model'], data['simulated'])}, {data['total_games']} {data['split']} games; "
            f"95% Wilson interval over games")


def success_per_generation(data: dict[str, Any]) -> bytes:
    fig = _figure()
    ax = fig.add_subplot()
    gens = [g for g in data["generations"] if not g["in_progress"] and g["best_success"] is not None]
    if gens:
        x = [g["generation"] for g in gens]
        best = [g["best_success"] for g in gens]
        ax.fill_between(x, [g["best_ci95"][0] for g in gens], [g["best_ci95"][1] for g in gens], color=BLUE,
                        alpha=0.18, linewidth=0, label="best: 95% interval")
        ax.plot(x, best, color=BLUE, marker="o", linewidth=2, label="best of the front")
        med = [g for g in gens if g["median_success"] is not None]
        if med:
            mx = [g["generation"] for g in med]
            ax.fill_between(mx, [g["median_ci95"][0] for g in med], [g["median_ci95"][1] for g in med], color=ORANGE,
                            alpha=0.15, linewidth=0, label="median: 95% interval")
            ax.plot(mx, [g["median_success"] for g in med], color=ORANGE, marker="s", linestyle="--", linewidth=1.6,
                    label="median candidate of the population")
        for g in gens:
            ax.annotate(f"n={g['best_games']}", (g["generation"], g["best_success"]), textcoords="offset points",
                        xytext=(0, 7), ha="center", fontsize=7, color=BLUE)
    else:
        _empty(ax, "no generation saved yet")
    pending = next((g for g in data["generations"] if g["in_progress"]), None)
    if pending is not None:
        how = "stopped by the budget" if pending["stopped_by_budget"] else "in progress"
        ax.axvline(pending["generation"], color=GREY, linestyle=":", linewidth=1.2,
                   label=f"generation {pending['generation']} {how}")
    ax.set_ylim(-0.02, 1.05)
    _pct(ax)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if pending is not None or gens:
        lo = min([g["generation"] for g in gens] + ([pending["generation"]] if pending else []))
        hi = max([g["generation"] for g in gens] + ([pending["generation"]] if pending else []))
        ax.set_xlim(lo - 0.3, hi + 0.3)
    ax.set_xlabel("generation")
    ax.set_ylabel("success rate")
    ax.set_title(f"Success per generation\n{_subtitle(data)}", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def front(data: dict[str, Any]) -> bytes:
    fig = _figure(8.0, 5.0)
    ax = fig.add_subplot()
    cands = data["candidates"]
    front_ids = {c["behaviour_id"] for c in data["front"]}
    others = [c for c in cands if c["behaviour_id"] not in front_ids]
    if not cands:
        _empty(ax, "no candidate has played a game yet")
    done = [c for c in others if not c["in_progress"]]
    live = [c for c in others if c["in_progress"]]
    if done:
        ax.scatter([c["tokens_per_episode"] for c in done], [c["success"] for c in done], s=22, color=GREY, alpha=0.55,
                   label="other candidates (raced-out ones on fewer games)")
    if live:
        ax.scatter([c["tokens_per_episode"] for c in live], [c["success"] for c in live], s=26, facecolors="none",
                   edgecolors=GREY, label="not scored by a generation yet (games so far)")
    fr = sorted(data["front"], key=lambda c: (c["tokens_per_episode"], -c["success"]))
    if fr:
        xs, ys = [c["tokens_per_episode"] for c in fr], [c["success"] for c in fr]
        err = [[max(0.0, c["success"] - c["ci95"][0]) for c in fr], [max(0.0, c["ci95"][1] - c["success"]) for c in fr]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", color=BLUE, ecolor=BLUE, elinewidth=1, capsize=3, markersize=7,
                    label="front (95% interval)", zorder=3)
        ax.step(xs, ys, where="post", color=BLUE, alpha=0.4, linewidth=1)
    seeds = [c for c in cands if c["seed"]]
    if seeds:
        ax.scatter([c["tokens_per_episode"] for c in seeds], [c["success"] for c in seeds], marker="*", s=200,
                   color=ORANGE, edgecolors="black", linewidths=0.6, label="seeds", zorder=4)
        for c in seeds:
            ax.annotate(c["name"], (c["tokens_per_episode"], c["success"]), textcoords="offset points", xytext=(8, -10),
                        fontsize=8, color="#b35900")
    best = next((c for c in cands if c["best"]), None)
    if best is not None:
        ax.scatter([best["tokens_per_episode"]], [best["success"]], marker="o", s=260, facecolors="none",
                   edgecolors=RED, linewidths=2, label=f"best {_short(best['behaviour_id'])}", zorder=5)
    ax.set_ylim(-0.02, 1.05)
    _pct(ax)
    ax.set_xlabel("tokens per episode (prompt + completion, mean)")
    ax.set_ylabel("success rate")
    objs = ",".join(data["config"].get("objectives", ["success"]))
    ax.set_title(f"Candidates and the front (objectives {objs}; shown: success vs tokens)\n{_subtitle(data)}",
                 fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return _png(fig)


def families(data: dict[str, Any]) -> bytes:
    fig = _figure()
    ax = fig.add_subplot()
    fams, rows = data["families"]["families"], data["families"]["rows"]
    if not fams or not rows:
        _empty(ax, "no episode recorded yet")
    else:
        width = 0.8 / len(rows)
        for i, r in enumerate(rows):
            xs, ys, lo, hi = [], [], [], []
            for j, f in enumerate(fams):
                if f in r["per_family"]:
                    p = r["per_family"][f]
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(p["success"])
                    lo.append(max(0.0, p["success"] - p["ci95"][0]))
                    hi.append(max(0.0, p["ci95"][1] - p["success"]))
            is_best = r["behaviour_id"] == data["best"]
            label = (("best " if is_best else "") + ("seed " if r["seed"] else "") +
                     f"{r['name']} ({_short(r['behaviour_id'])})")
            ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=3, color=RED if is_best else PALETTE[i % len(PALETTE)],
                   alpha=0.85 if is_best else 0.7, edgecolor="black", linewidth=0.5, label=label,
                   error_kw={"elinewidth": 1, "ecolor": "black"})
            for x, y in zip(xs, ys):
                ax.text(x, 0.01, f"{100 * y:.0f}%", ha="center", va="bottom", fontsize=7, rotation=90,
                        color="black")
        ns = []
        for f in fams:
            counts = sorted({r["per_family"][f]["games"] for r in rows if f in r["per_family"]})
            ns.append("/".join(map(str, counts)))
        ax.set_xticks(range(len(fams)), [f"{f}\nn={n}" for f, n in zip(fams, ns)])
    _headroom(ax)
    ax.set_xlabel("task family (n = games of the family)")
    ax.set_ylabel("success rate")
    ax.set_title(f"Success per task family: the best harness against the seeds\n{_subtitle(data)}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        _legend_below(ax, len(rows))
    return _png(fig)


def episodes(data: dict[str, Any]) -> bytes:
    fig = _figure()
    ax = fig.add_subplot()
    gens = data["generations"]
    if not gens:
        _empty(ax, "no episode recorded yet")
    else:
        done = [g for g in gens if not g["in_progress"]]
        live = [g for g in gens if g["in_progress"]]
        if done:
            x = [g["generation"] for g in done]
            played = [g["episodes_played"] for g in done]
            saved = [g["saved_by_racing"] for g in done]
            ax.bar(x, played, 0.6, color=BLUE, alpha=0.8, label="episodes played")
            ax.bar(x, saved, 0.6, bottom=played, color=GREEN, alpha=0.35, hatch="//", edgecolor=GREEN,
                   label="episodes saved by racing (not played)")
            top = max(g["episodes_played"] + g["saved_by_racing"] for g in gens)
            ax.set_ylim(0, max(1, top) * 1.3)
            for g in done:
                ax.annotate(f"{g['episodes_played']}+{g['saved_by_racing']}",
                            (g["generation"], g["episodes_played"] + g["saved_by_racing"]), textcoords="offset points",
                            xytext=(0, 3), ha="center", fontsize=7)
        if live:
            stopped = any(g["stopped_by_budget"] for g in live)
            ax.bar([g["generation"] for g in live], [g["episodes_played"] for g in live], 0.6, color="none",
                   edgecolor=GREY, hatch="..", label="generation stopped by the budget (played)" if stopped
                   else "generation in progress (played so far)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("generation")
    ax.set_ylabel("episodes")
    if live and not done:
        ax.set_ylim(0, max(1, max(g["episodes_played"] for g in live)) * 1.3)
    model = _model_label(data["model"], data["simulated"])
    ax.set_title(f"Episodes per generation and what racing saved\nmodel {model}, {data['total_games']} games per full "
                 f"evaluation", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8, ncol=3)
    return _png(fig)


# --- the transfer table -----------------------------------------------------------------------------------------
def transfer(table: dict[str, Any]) -> bytes:
    """One harness: success per family (and all games) per model, with 95% intervals. Several harnesses: the
    harness x model grid of overall success, each cell with its interval and n."""
    harnesses = list(dict.fromkeys(e["harness"] for e in table["entries"]))
    if len(harnesses) > 1:
        return _transfer_grid(table, harnesses)
    return _transfer_bars(table)


def _entry_label(e: dict[str, Any]) -> str:
    return _model_label(e["model"], e["simulated"])


def _games_line(table: dict[str, Any], fig: Figure) -> str:
    import textwrap

    text = (f"{table['split']} games ({table['data_source']}), n = games per cell; 95% Wilson interval over games"
            if table.get("split") else "95% Wilson interval over games")
    return textwrap.fill(text, width=int(fig.get_figwidth() * 11))


def _transfer_bars(table: dict[str, Any]) -> bytes:
    entries = table["entries"]
    fams = list(table["families"]) + ["all"]
    fig = _figure(max(8.0, 1.3 * len(fams) + 2), 4.8)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(entries))
    for i, e in enumerate(entries):
        xs, ys, lo, hi = [], [], [], []
        for j, f in enumerate(fams):
            cell = e["all"] if f == "all" else e["per_family"].get(f)
            if cell is None or not cell["games"]:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(cell["success"])
            lo.append(max(0.0, cell["success"] - cell["ci95"][0]))
            hi.append(max(0.0, cell["ci95"][1] - cell["success"]))
        ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=3, color=PALETTE[i % len(PALETTE)], alpha=0.8,
               edgecolor="black", linewidth=0.5,
               label=f"{_entry_label(e)} (n={e['all']['games']}, {e['tokens_per_episode']:.0f} tokens/ep)",
               error_kw={"elinewidth": 1, "ecolor": "black"})
        for x, y in zip(xs, ys):
            ax.text(x, 0.01, f"{100 * y:.0f}%", ha="center", va="bottom", fontsize=7, rotation=90)
    ns = []
    for f in fams:
        counts = sorted({(e["all"] if f == "all" else e["per_family"].get(f, {"games": 0}))["games"] for e in entries})
        ns.append("/".join(map(str, counts)))
    ax.set_xticks(range(len(fams)), [f"{f}\nn={n}" for f, n in zip(fams, ns)])
    _headroom(ax)
    ax.set_xlabel("task family")
    ax.set_ylabel("success rate")
    h = entries[0]["harness"] if entries else "?"
    ax.set_title(f"Transfer of harness {h} across models\n{_games_line(table, fig)}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if entries:
        _legend_below(ax, len(entries))
    return _png(fig)


def _transfer_grid(table: dict[str, Any], harnesses: list[str]) -> bytes:
    import numpy as np

    models = list(dict.fromkeys(e["model"] for e in table["entries"]))
    sim = {e["model"]: e["simulated"] for e in table["entries"]}
    cell = {(e["harness"], e["model"]): e for e in table["entries"]}
    grid = np.full((len(harnesses), len(models)), np.nan)
    for (h, m), e in cell.items():
        if e["all"]["games"]:
            grid[harnesses.index(h), models.index(m)] = e["all"]["success"]
    fig = _figure(max(8.0, 2.2 * len(models) + 3), max(3.6, 1.1 * len(harnesses) + 2.4))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for (h, m), e in cell.items():
        i, j = harnesses.index(h), models.index(m)
        a = e["all"]
        text = (f"{100 * a['success']:.0f}%\n[{100 * a['ci95'][0]:.0f}-{100 * a['ci95'][1]:.0f}]\nn={a['games']}"
                if a["games"] else "no games")
        ax.text(j, i, text, ha="center", va="center", fontsize=9,
                color="white" if a["games"] and a["success"] < 0.6 else "black")
    ax.set_xticks(range(len(models)), [_model_label(m, sim[m]) for m in models], rotation=15, ha="right")
    ax.set_yticks(range(len(harnesses)), harnesses)
    ax.set_xlabel("model")
    ax.set_ylabel("harness")
    bar = fig.colorbar(im, ax=ax, fraction=0.05)
    bar.set_label("success rate (all games)")
    bar.ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_title(f"Harness x model: success with 95% interval\n{_games_line(table, fig)}", fontsize=10)
    return _png(fig)


__all__ = ["run_plots", "success_per_generation", "front", "families", "episodes", "transfer"]
