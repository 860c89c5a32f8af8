"""Harness references into evolution runs: `RUN_DIR:best` and `RUN_DIR:<behaviour id>`, as `apply` and
`population export` take them. A harness with an Experience bank comes with the bank it learned on the
run's train games (its episodes' edits applied in the run's race order); `apply` reads that bank frozen,
so lessons never flow from held-out games into the score."""

from __future__ import annotations

from pathlib import Path

from harnevo.errors import HarnevoError
from harnevo.harness.experience import ExperienceBank
from harnevo.harness.spec import Harness


def is_run_ref(ref: str) -> bool:
    head, sep, tail = ref.rpartition(":")
    return bool(sep and head and tail) and (Path(head) / "population.sqlite").is_file()


def resolve(ref: str) -> tuple[Harness, ExperienceBank | None]:
    """(harness, learned bank or None) for `RUN_DIR:best` or `RUN_DIR:<id>`."""
    from harnevo.evolve.run import BEST, BEST_BANK

    head, _, which = ref.rpartition(":")
    run_dir = Path(head)
    if which == "best":
        best = run_dir / BEST
        if not best.is_file():
            raise HarnevoError(f"{run_dir} has no {BEST} yet: the run has not finished a generation; "
                               f"use {run_dir}:<behaviour id> or resume it")
        h = Harness.from_yaml(best.read_text(encoding="utf-8"), source=str(best))
        bank_file = run_dir / BEST_BANK
        bank = ExperienceBank(bank_file, size=h.memory.experience_bank_size) if bank_file.is_file() else None
        return h, bank
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    try:
        h = store.harness(which)
        return h, learned_bank(store, h)
    finally:
        store.close()


def learned_bank(store, h: Harness) -> ExperienceBank | None:
    """The bank `h` learned in the run: its ok episodes' edits in the run's race order."""
    if not h.memory.experience:
        return None
    from harnevo.envs.games import parse_families, resolve_games
    from harnevo.evolve.config import parse_config
    from harnevo.evolve.racing import race_order

    cfg = parse_config(dict(store.config()))
    split = store.versions().get("split") or cfg.split
    games, _ = resolve_games(split, data=cfg.data, families=parse_families(cfg.families), n=cfg.games, seed=cfg.seed,
                             log=lambda *a, **k: None)
    rows = store.episodes(h.behaviour_id, store.versions().get("model", cfg.model))
    bank = ExperienceBank(None, size=h.memory.experience_bank_size)
    for g in race_order(games, cfg.seed):
        row = rows.get((g.split, g.name, 0))
        if row is not None and row.status == "ok":
            bank.apply(row.bank_edits)
    return bank


def export_with_bank(run_dir: Path, harness_id: str, out: Path) -> list[Path]:
    from harnevo.files import atomic_write

    h, bank = resolve(f"{run_dir}:{harness_id}")
    atomic_write(out, h.to_yaml())
    written = [out]
    if bank is not None:
        bank_path = out.with_name(out.stem + ".experience.json")
        atomic_write(bank_path, bank.to_json())
        written.append(bank_path)
    return written
