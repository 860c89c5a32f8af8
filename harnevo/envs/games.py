"""ALFWorld game sets: where they are, which splits and task families they hold, and seeded samples.

Official games live in `$ALFWORLD_DATA/json_2.1.1/<split>/<task>-<params>/<trial>/game.tw-pddl`, as
`alfworld-download` lays them out; harnevo's generated games use the same layout, and a generated
split carries the generator's manifest. The task families (`FAMILIES`, `parse_families`, ...) are
defined in `harnevo.envs.families` and can be imported from here too.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from harnevo.envs.families import FAMILIES, GAME_FILE, TASK_TYPE_TO_FAMILY, family_of, parse_families
from harnevo.envs.generate import generate, read_manifest
from harnevo.errors import DataNotFoundError
from harnevo.files import cache_root

HOW_TO_GET_DATA = ("get games with `alfworld-download` (sets $ALFWORLD_DATA), point --data or $ALFWORLD_DATA at "
                   "the folder that holds json_2.1.1, or run `harnevo data generate`")


@dataclass(frozen=True, order=True)
class Game:
    """One game file. `name` is `<task folder>/<trial>`, unique within a split."""

    split: str
    name: str
    path: str
    family: str

    @property
    def task_type(self) -> str:
        return FAMILIES[self.family]


def candidate_roots(data: str | os.PathLike | None = None) -> list[Path]:
    """Where to look, in order: --data, then $ALFWORLD_DATA."""
    roots: list[Path] = []
    if data:
        roots.append(Path(data).expanduser())
    elif os.environ.get("ALFWORLD_DATA"):
        roots.append(Path(os.environ["ALFWORLD_DATA"]).expanduser())
    return roots


def _json_dir(root: Path) -> Path:
    return root if root.name == "json_2.1.1" else root / "json_2.1.1"


def require_data_root(data: str | os.PathLike | None = None) -> Path:
    """`find_data_root`, or a DataNotFoundError saying where it looked and how to get data."""
    root = find_data_root(data)
    if root is None:
        looked = ", ".join(str(r) for r in candidate_roots(data)) or "no --data given and $ALFWORLD_DATA unset"
        raise DataNotFoundError(f"no ALFWorld games found (looked in: {looked}); {HOW_TO_GET_DATA}")
    return root


def find_data_root(data: str | os.PathLike | None = None) -> Path | None:
    """The first candidate root holding a json_2.1.1 folder, or None."""
    for root in candidate_roots(data):
        if _json_dir(root).is_dir():
            return root
    return None


def scan_split(root: Path, split: str) -> list[Game]:
    """Every game of one split, sorted by name. Unsolvable official games are kept out by ALFWorld's
    own flag only when it says so (the file's `solvable` key is read lazily by the engine, not here)."""
    split_dir = _json_dir(root) / split
    games: list[Game] = []
    if not split_dir.is_dir():
        return games
    for task_dir in sorted(split_dir.iterdir()):
        fam = family_of(task_dir.name)
        if fam is None or not task_dir.is_dir():
            continue
        if "movable" in task_dir.name or "Sliced" in task_dir.name:
            continue  # ALFWorld does not support these in the text engine
        for trial in sorted(task_dir.iterdir()):
            game_file = trial / GAME_FILE
            if game_file.is_file():
                games.append(Game(split=split, name=f"{task_dir.name}/{trial.name}", path=str(game_file),
                                  family=fam))
    return games


def list_splits(root: Path) -> list[str]:
    j = _json_dir(root)
    return sorted(p.name for p in j.iterdir() if p.is_dir()) if j.is_dir() else []


def sample(games: list[Game], n: int | None, seed: int = 0) -> list[Game]:
    """Sorted, then a seeded sample of n (all when n is None or >= len)."""
    games = sorted(games)
    if n is None or n >= len(games):
        return games
    rng = random.Random(seed)
    return sorted(rng.sample(games, n))


def load_games(split: str, *, data: str | os.PathLike | None = None, families: list[str] | None = None,
               n: int | None = None, seed: int = 0, root: Path | None = None) -> list[Game]:
    """The games of `split` (filtered by family, sampled with `seed`). Raises DataNotFoundError with
    where it looked and how to get data when there are none."""
    root = root or require_data_root(data)
    games = scan_split(root, split)
    if not games:
        have = ", ".join(list_splits(root)) or "none"
        raise DataNotFoundError(f"no games in split {split!r} under {_json_dir(root)} (splits there: {have}); "
                                f"{HOW_TO_GET_DATA}")
    if families:
        games = [g for g in games if g.family in families]
        if not games:
            raise DataNotFoundError(f"split {split!r} under {_json_dir(root)} has no games of families "
                                    f"{', '.join(families)}")
    return sample(games, n, seed)


GENERATED_SPLIT = "generated"
DEFAULT_GENERATED_GAMES = 60
DEFAULT_GENERATED_SEED = 0


def generated_cache_root() -> Path:
    """Where games generated for the embedded default live ($HARNEVO_CACHE or ~/.cache/harnevo)."""
    return cache_root() / "games" / f"seed{DEFAULT_GENERATED_SEED}-n{DEFAULT_GENERATED_GAMES}"


def ensure_generated(log=print) -> Path:
    """The embedded default game set: generated once into the cache folder, reused after."""
    root = generated_cache_root()
    if read_manifest(_json_dir(root) / GENERATED_SPLIT) is not None and scan_split(root, GENERATED_SPLIT):
        return root
    if (_json_dir(root) / GENERATED_SPLIT).exists():  # an interrupted earlier generation: start again
        shutil.rmtree(_json_dir(root) / GENERATED_SPLIT)
    log(f"no official ALFWorld data found: generating {DEFAULT_GENERATED_GAMES} synthetic games once into {root}")
    generate(root, DEFAULT_GENERATED_GAMES, seed=DEFAULT_GENERATED_SEED, split=GENERATED_SPLIT,
             workers=os.cpu_count() or 1)
    return root


def resolve_games(split: str | None, *, data: str | os.PathLike | None = None, families: list[str] | None = None,
                  n: int | None = None, seed: int = 0, log=print) -> tuple[list[Game], str]:
    """The games to play and where they come from ('official ALFWorld ...' or 'generated (synthetic) ...').

    With no split: official valid_seen when official data is found, else the generated default set.
    Split 'generated' without --data uses the generated default set."""
    root = find_data_root(data)
    if split is None:
        split = "valid_seen" if root is not None else GENERATED_SPLIT
    if root is None and split == GENERATED_SPLIT:
        root = ensure_generated(log)
    games = load_games(split, data=data, families=families, n=n, seed=seed, root=root)
    synthetic = read_manifest(_json_dir(Path(root)) / split) is not None
    kind = "generated (synthetic) ALFWorld-format games" if synthetic else "official ALFWorld games"
    return games, f"{kind} from {root}"


__all__ = ["Game", "FAMILIES", "TASK_TYPE_TO_FAMILY", "GAME_FILE", "HOW_TO_GET_DATA", "GENERATED_SPLIT", "family_of",
           "parse_families", "candidate_roots", "find_data_root", "require_data_root", "scan_split", "list_splits",
           "sample", "load_games", "generated_cache_root", "ensure_generated", "resolve_games"]
