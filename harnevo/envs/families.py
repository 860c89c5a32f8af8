"""ALFWorld's task families and the name of a game file: the vocabulary that the game sets
(`harnevo.envs.games`), the scene knowledge (`harnevo.envs.scenes`), the generator and the game
statistics share. It imports nothing of harnevo but its errors."""

from __future__ import annotations

from harnevo.errors import HarnevoError

# short family name -> ALFWorld task type (the prefix of every game folder)
FAMILIES: dict[str, str] = {
    "pick": "pick_and_place_simple",
    "look": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick2": "pick_two_obj_and_place",
}
TASK_TYPE_TO_FAMILY = {v: k for k, v in FAMILIES.items()}
GAME_FILE = "game.tw-pddl"


def family_of(task_folder: str) -> str | None:
    # longest task type first: no type is a prefix of another today, but be safe
    for task_type in sorted(TASK_TYPE_TO_FAMILY, key=len, reverse=True):
        if task_folder.startswith(task_type + "-") or task_folder == task_type:
            return TASK_TYPE_TO_FAMILY[task_type]
    return None


def parse_families(spec: str | list[str] | None) -> list[str] | None:
    """'heat,cool' -> ['heat', 'cool']; accepts short names and full task types."""
    if spec is None or spec == "" or spec == []:
        return None
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        fam = item if item in FAMILIES else TASK_TYPE_TO_FAMILY.get(item)
        if fam is None:
            raise HarnevoError(f"unknown task family {item!r}; known: {', '.join(FAMILIES)}")
        if fam not in out:
            out.append(fam)
    return out or None


__all__ = ["FAMILIES", "TASK_TYPE_TO_FAMILY", "GAME_FILE", "family_of", "parse_families"]
