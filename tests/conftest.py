"""Shared fixtures: the workplace's official ALFWorld games (../shared/alfworld) and hermetic caches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_ALFWORLD = Path(__file__).resolve().parents[2] / "shared" / "alfworld"


def _official_root() -> Path | None:
    env = os.environ.get("ALFWORLD_DATA")
    for root in ([Path(env)] if env else []) + [SHARED_ALFWORLD]:
        if (root / "json_2.1.1" / "valid_seen").is_dir():
            return root
    return None


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    root = _official_root()
    if root is None:
        pytest.skip("official ALFWorld games not found (../shared/alfworld or $ALFWORLD_DATA)")
    return root


@pytest.fixture(scope="session", autouse=True)
def _hermetic_session(tmp_path_factory):
    """harnevo's caches (replies, engine steps, generated games) go to a temp dir for the whole session,
    before any module-scoped fixture (an engine pool, say) opens them."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNEVO_CACHE", str(tmp_path_factory.getbasetemp() / "harnevo-cache"))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _hermetic(tmp_path_factory, monkeypatch):
    """Reply caches of tests go to a temp dir; generated games are shared by the whole session."""
    monkeypatch.setenv("HARNEVO_CACHE", str(tmp_path_factory.getbasetemp() / "harnevo-cache"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
