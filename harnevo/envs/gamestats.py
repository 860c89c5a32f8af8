"""Statistics of ALFWorld game sets, to compare harnevo's generated games with the official ones.

Per game, read from its files only (no engine): receptacles, objects (instances: every `- object` of
the problem whose name carries a position), the share of receptacles that are `openable`, and the
length of the stored walkthrough (official games carry the PDDL planner's plan; generated games the
shortest winning list the generator found, see harnevo.envs.generate). Medians per set, walkthrough
medians per task family.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from harnevo.envs.families import FAMILIES, GAME_FILE, family_of

_OBJ = re.compile(r"^\s*(\S+_bar_\S+) - object\s*$", re.M)
_REC = re.compile(r"^\s*(\S+) - receptacle\s*$", re.M)
_OPENABLE = re.compile(r"\(openable (\S+)\)")


@dataclass(frozen=True)
class GameStats:
    name: str
    family: str
    scene: int | None
    receptacles: int
    objects: int
    openable_share: float
    walkthrough: int | None


def game_stats(game_dir: str | Path) -> GameStats:
    d = Path(game_dir)
    problem = (d / "initial_state.pddl").read_text()
    head = problem.split("(:init", 1)[0]
    receptacles = set(_REC.findall(head))
    openable = set(_OPENABLE.findall(problem)) & receptacles
    walk = None
    game_file = d / GAME_FILE
    if game_file.is_file():
        w = json.loads(game_file.read_text()).get("walkthrough")
        walk = len(w) if w else None
    scene = None
    try:
        scene = int(json.loads((d / "traj_data.json").read_text())["scene"]["scene_num"])
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return GameStats(name=f"{d.parent.name}/{d.name}", family=family_of(d.parent.name) or "?", scene=scene,
                     receptacles=len(receptacles), objects=len(set(_OBJ.findall(head))),
                     openable_share=len(openable) / len(receptacles) if receptacles else 0.0, walkthrough=walk)


def split_stats(split_path: str | Path) -> list[GameStats]:
    """Stats of every game folder (one holding initial_state.pddl) under a split folder, sorted."""
    root = Path(split_path)
    return [game_stats(p.parent) for p in sorted(root.glob("*/*/initial_state.pddl"))
            if "movable" not in p.parent.parent.name and "Sliced" not in p.parent.parent.name]


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(statistics.median(xs)) if xs else None


def summary(stats: list[GameStats]) -> dict[str, float | None | int]:
    """Medians of one game set: receptacles, objects, openable share, walkthrough per family."""
    out: dict[str, float | None | int] = {
        "games": len(stats),
        "receptacles": _median([s.receptacles for s in stats]),
        "objects": _median([s.objects for s in stats]),
        "openable_share": _median([s.openable_share for s in stats]),
    }
    for fam in FAMILIES:
        out[f"walkthrough_{fam}"] = _median([s.walkthrough for s in stats if s.family == fam])
    return out


ROW_LABELS = {"receptacles": "receptacles per game", "objects": "objects per game",
              "openable_share": "share of openable receptacles",
              **{f"walkthrough_{f}": f"solution length, {t}" for f, t in FAMILIES.items()}}


@dataclass
class Row:
    key: str
    label: str
    generated: float | None
    official: float | None

    @property
    def ratio(self) -> float | None:
        if self.generated is None or not self.official:
            return None
        return self.generated / self.official

    def within(self, tol: float) -> bool:
        r = self.ratio
        return r is not None and abs(r - 1.0) <= tol


def compare(generated: list[GameStats], official: list[GameStats]) -> list[Row]:
    g, o = summary(generated), summary(official)
    return [Row(k, label, g[k], o[k]) for k, label in ROW_LABELS.items()]


def _fmt(v: float | None, key: str) -> str:
    if v is None:
        return "-"
    if key == "openable_share":
        return f"{v:.2f}"
    return f"{v:g}"


def markdown_table(rows: list[Row], *, n_generated: int, n_official: int,
                   official_name: str = "official valid_seen") -> str:
    lines = [f"| median | generated ({n_generated} games) | {official_name} ({n_official} games) | ratio |",
             "|---|---:|---:|---:|"]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"| {r.label} | {_fmt(r.generated, r.key)} | {_fmt(r.official, r.key)} | {ratio} |")
    return "\n".join(lines)


def to_dict(rows: list[Row]) -> list[dict]:
    return [{**asdict(r), "ratio": r.ratio} for r in rows]
