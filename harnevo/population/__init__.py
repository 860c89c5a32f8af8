"""The population store of an evolution run: harnesses with their lineage, every evaluated episode with
its trajectory, every generation with the RNG state to continue from (one SQLite file per run)."""

from harnevo.population.store import (STORE_FILE, EpisodeRow, Store, config_hash, rng_state_from_json,
                                      rng_state_to_json)

__all__ = ["STORE_FILE", "EpisodeRow", "Store", "config_hash", "rng_state_from_json", "rng_state_to_json"]
