"""The report as one self-contained HTML page: plots embedded as `data:image/png;base64,...` URIs, the style
inline, no script, no link, no font or image fetched from anywhere, so it opens offline and can be mailed
as one file. Every text that comes from a run (names, YAML, the mutator's evidence) is escaped."""

from __future__ import annotations

import base64
import json
from html import escape
from typing import Any

CSS = """
body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1180px; color: #222;
       padding: 0 16px; line-height: 1.4; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
.sub { color: #555; font-size: 13px; } .sim { color: #b35900; font-weight: bold; }
.banner { padding: 8px 12px; border-radius: 4px; margin: 12px 0; font-size: 14px; }
.done { background: #e8f5e9; border: 1px solid #a5d6a7; } .live { background: #fff8e1; border: 1px solid #ffd54f; }
.plots { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 16px; }
figure { margin: 0; } figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 12px; color: #555; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #fdecea; font-weight: bold; } code, pre { font-family: DejaVu Sans Mono, monospace; }
pre { font-size: 12px; background: #fafafa; border: 1px solid #eee; padding: 8px; overflow-x: auto;
      white-space: pre-wrap; }
pre.diff { white-space: pre; } pre.diff span { display: inline-block; min-width: 100%; }
.add { color: #116329; background: #dafbe1; } .del { color: #82071e; background: #ffebe9; }
.hunk { color: #0550ae; } .meta { color: #777; }
.refl { border-left: 3px solid #9467bd; padding-left: 8px; margin: 4px 0; }
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]"


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _table(head: list[str], rows: list[tuple[str, list[tuple[str, bool]]]]) -> str:
    """rows: (css class, [(cell html, numeric)])"""
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for cls, cells in rows:
        out.append(f'<tr class="{cls}">' + "".join(f'<td class="num">{c}</td>' if num else f"<td>{c}</td>"
                                                    for c, num in cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


# --- the run report --------------------------------------------------------------------------------------------
CAPTIONS = {
    "success_per_generation": "Best (of the front, by the run's rule) and median candidate per generation, "
                              "with 95% intervals.",
    "front": "Every candidate scored so far: success vs tokens per episode; the front, the seeds and the best marked.",
    "families": "Success per task family of the best harness and of the seeds, with 95% intervals.",
    "episodes": "Episodes played per generation, and the episodes racing did not need to play.",
}


def run_page(data: dict[str, Any], images: dict[str, bytes]) -> str:
    sim = ' <span class="sim">[simulated model]</span>' if data["simulated"] else ""
    parts = [f"<h1>harnevo run report: {escape(data['run_dir'])}</h1>",
             f'<div class="sub">model <b>{escape(str(data["model"]))}</b>{sim}; {data["total_games"]} '
             f'{escape(str(data["split"]))} games ({escape(str(data["data_source"]))}); '
             f'{escape(_config_line(data))}</div>',
             _state_banner(data), _best_line(data)]
    parts.append('<h2>Plots</h2><div class="plots">')
    for name, png in images.items():
        parts.append(f"<figure>{_img(png, name.replace('_', ' '))}<figcaption>{escape(CAPTIONS.get(name, name))}"
                     f"</figcaption></figure>")
    parts.append("</div>")
    parts += [_front_table(data), _family_table(data), _lineage(data), _diff(data), _footer(data)]
    return page(f"harnevo report {data['run_dir']}", "\n".join(p for p in parts if p))


def _config_line(data: dict[str, Any]) -> str:
    c, b = data["config"], data["budget"]
    bits = [f"{c.get('search', 'evolve')} search", f"population {c.get('population', '?')}",
            f"objectives {','.join(c.get('objectives', []))}", f"seed {c.get('seed', '?')}",
            f"budget {b['knob']}={b['limit']}", f"racing {'on' if c.get('racing') else 'off'}"]
    return ", ".join(bits)


def _state_banner(data: dict[str, Any]) -> str:
    st = data["state"]
    if st["finished"]:
        saved = "no generation" if st["last_generation"] is None else f"{st['last_generation'] + 1} generation(s)"
        budget = ""
        if st["stopped_by_budget"]:
            budget = " at its budget"
            if st["pending_generation"] is not None:
                budget += (f" (during generation {st['pending_generation']}: its {len(st['pending_candidates'])} "
                           f"candidate(s) were not all scored; their figures are over the games they played)")
        return (f'<div class="banner done">Finished{budget}: {saved} saved, '
                f'{data["episodes_in_store"]} episodes in the store.</div>')
    saved = "no generation saved yet" if st["last_generation"] is None else \
        f"generations 0-{st['last_generation']} saved (last at {escape(str(st['time']))})"
    return (f'<div class="banner live">Run in progress (or stopped before its end; <code>harnevo resume</code> '
            f'continues it): {saved}; generation {st["pending_generation"]} has {len(st["pending_candidates"])} '
            f'candidate(s) and {st["pending_episodes"]} episode(s) recorded so far. Figures of unfinished candidates '
            f'are over the games they have played.</div>')


def _best_line(data: dict[str, Any]) -> str:
    if not data["best"]:
        return "<p>No candidate has played a game yet.</p>"
    s = data["best_stats"]
    prov = " (provisional: no generation saved yet)" if data["best_provisional"] else ""
    return (f"<p>Best harness{prov}: <code>{escape(data['best'])}</code>, success <b>{_pct(s['success'])}"
            f"{_ci(s['ci95'])}</b> over {s['games']} games, {s['tokens_per_episode']:.0f} tokens/episode, "
            f"{s['meta_per_episode']:.2f} meta-actions/episode. Spend so far: {data['spend']['tokens']} tokens, "
            f"${data['spend']['usd']:.4f}.</p>")


def _state_of(c: dict[str, Any]) -> str:
    if c["in_progress"]:
        return "games so far"
    if c["stopped_early"]:
        return "raced out"
    if c.get("below_floor"):
        return "all games, below the floor"
    return "all games" if c["complete"] else "incomplete"


def _front_table(data: dict[str, Any]) -> str:
    head = ["behaviour id", "name", "success [95% CI]", "games", "tokens/ep", "meta/ep", "cost/ep", "made by", "gen",
            "state"]
    rows = []
    for c in data["front"]:
        mark = " &#9733; best" if c["best"] else ""
        rows.append(("best" if c["best"] else "", [
            (f"<code>{escape(c['behaviour_id'])}</code>{mark}", False), (escape(c["name"]), False),
            (_pct(c["success"]) + _ci(c["ci95"]), True), (str(c["games"]), True),
            (f"{c['tokens_per_episode']:.0f}", True), (f"{c['meta_per_episode']:.2f}", True),
            (f"${c['cost_per_episode']:.5f}", True), (escape(c["operator"]), False), (str(c["generation"]), True),
            (_state_of(c), False)]))
    title = "The front" + (" (provisional)" if data["best_provisional"] else
                           f" after generation {data['state']['last_generation']}")
    note = (f'<p class="sub">success over games with Wilson 95% intervals; model {escape(str(data["model"]))}'
            f'{" (simulated)" if data["simulated"] else ""}; {data["total_games"]} games per full evaluation.</p>')
    if not rows:
        return f"<h2>{title}</h2><p>Empty: no candidate scored yet.</p>"
    return f"<h2>{title}</h2>{note}" + _table(head, rows)


def _family_table(data: dict[str, Any]) -> str:
    fams, rows = data["families"]["families"], data["families"]["rows"]
    if not fams:
        return ""
    out = []
    for r in rows:
        best = r["behaviour_id"] == data["best"]
        role = ("best" if best else "") + (" seed" if r["seed"] else "")
        cells = [(f"<code>{escape(r['behaviour_id'])}</code> {escape(r['name'])} ({role.strip()})", False)]
        for f in fams:
            p = r["per_family"].get(f)
            cells.append(("-" if p is None else f"{_pct(p['success'])}{_ci(p['ci95'])} n={p['games']}", True))
        out.append(("best" if best else "", cells))
    return "<h2>Per task family</h2>" + _table(["harness"] + fams, out)


def _lineage(data: dict[str, Any]) -> str:
    if not data["lineage"]:
        return ""
    items = []
    for step in data["lineage"]:
        genes = "".join(_gene_change(k, v) for k, v in step["genes"].items())
        extra = ""
        if step["reflection"] is not None:
            extra += (f'<div class="refl"><b>mutator evidence and proposal</b><pre>{escape(_json(step["reflection"]))}'
                      f"</pre></div>")
        if step["detail"]:
            extra += f"<details><summary>detail</summary><pre>{escape(_json(step['detail']))}</pre></details>"
        score = ("" if step["success"] is None else
                 f"; success {_pct(step['success'])}{_ci(step['ci95'])} over {step['games']} games")
        parents = ", ".join(f"<code>{escape(p)}</code>" for p in step["parents"]) or "none (a seed)"
        items.append(f"<li><b>generation {step['generation']}</b>: <code>{escape(step['behaviour_id'])}</code> "
                     f"{escape(step['name'])}, made by <b>{escape(step['operator'])}</b> from {parents}{score}"
                     + (f"<ul>{genes}</ul>" if genes else "") + extra + "</li>")
    return (f"<h2>Lineage of the best harness</h2><p class=\"sub\">From its seed to it, following first parents; "
            f"each step names the operator that made it and the genes it changed.</p><ol class=\"lineage\">"
            + "\n".join(items) + "</ol>")


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _gene_change(name: str, value: Any) -> str:
    """One changed gene: [before, after] as 'before -> after', anything else as it is."""
    if isinstance(value, list) and len(value) == 2:
        return (f"<li><code>{escape(name)}</code>: <code>{escape(_compact(value[0]))}</code> &rarr; "
                f"<code>{escape(_compact(value[1]))}</code></li>")
    return f"<li><code>{escape(name)}</code>: <code>{escape(_compact(value))}</code></li>"


def _diff(data: dict[str, Any]) -> str:
    d = data["diff"]
    if d is None:
        return ""
    head = (f"<h2>The best against its seed</h2><p class=\"sub\">Unified diff of the canonical YAML, from seed "
            f"<code>{escape(d['seed'])}</code> ({escape(d['seed_name'])}) to the best "
            f"<code>{escape(d['best'])}</code>.</p>")
    if not d["text"]:
        return head + "<p>The best harness is the seed itself: nothing changed.</p>"
    lines = []
    for line in d["text"].splitlines():
        cls = ("meta" if line.startswith(("---", "+++")) else "add" if line.startswith("+") else
               "del" if line.startswith("-") else "hunk" if line.startswith("@@") else "")
        text = escape(line) or " "
        lines.append(f'<span class="{cls}">{text}</span>' if cls else text)
    return head + '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _footer(data: dict[str, Any]) -> str:
    v = ", ".join(f"{k} {escape(str(val))}" for k, val in data["versions"].items())
    return (f"<h2>About this run</h2><p class=\"sub\">versions: {v}. Episodes in the store: "
            f"{data['episodes_in_store']}. Made by <code>harnevo report</code> from the run's store; every success "
            f"rate is over games with Wilson's 95% interval"
            f"{'; the model is simulated (sim/...), not a language model' if data['simulated'] else ''}.</p>")


__all__ = ["run_page", "page"]
