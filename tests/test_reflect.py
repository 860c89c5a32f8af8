"""Reflective mutation end to end (`harnevo evolve --mutator-model`), the mutator a local OpenAI-compatible
server reached through litellm (tests/mutator_servers.py): requests carry failure evidence and stay under the
token cap; accepted proposals become children whose lineage records them; a mutator that answers truncated,
empty, oversized, template-injecting and unparseable proposals, or is down, is survived: every such proposal
is rejected and counted by reason, and the run finishes. Plus unit checks of extraction and validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_openai_server import TEST_API_KEY, approx_tokens  # noqa: E402
from mutator_servers import CLOSE, KINDS, OPEN, BadMutator, GoodMutator  # noqa: E402

CAP = 700  # below the ~1,000 tokens the full evidence takes: trimming must act
SMALL = ["--model", "sim/bounded", "--seeds", "react,bpe_always_on", "--split", "valid_train", "--games", "4",
         "--minibatch", "2", "--max-steps", "8", "--seed", "3", "--concurrency", "4",
         "--workers", "2"]


def _evolve(run_dir: Path, data: Path, server, model: str, generations: int, tmp_path: Path,
            population: int = 4) -> subprocess.CompletedProcess:
    cfg = tmp_path / f"{run_dir.name}.yaml"
    cfg.write_text(f"mutator_max_tokens: {CAP}\nmutator_prob: 1.0\ncrossover_prob: 0.0\n")
    args = [sys.executable, "-m", "harnevo.cli", "evolve", *SMALL, "--generations", str(generations),
            "--data", str(data), "--run-dir", str(run_dir), "--config", str(cfg),
            "--mutator-model", model, "--mutator-api-base", server.url, "--population", str(population)]
    return subprocess.run(args, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "OPENAI_API_KEY": TEST_API_KEY})


def _rows(run_dir: Path) -> list[dict]:
    from harnevo.population.store import Store

    store = Store.open(run_dir)
    try:
        return [{**r, "harness": store.harness(r["behaviour_id"])} for r in store.harness_rows()]
    finally:
        store.close()


def test_proposals_from_failure_evidence_become_children_with_lineage(alfworld_data, tmp_path):
    run_dir = tmp_path / "good"
    with GoodMutator() as srv:
        r = _evolve(run_dir, alfworld_data, srv, "openai/mutator-good", 1, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert srv.requests_text, "the mutator was never asked"
    for text in srv.requests_text:  # every request: under the cap, with failure evidence
        assert approx_tokens(text) <= CAP
        assert "Evidence from games it lost" in text and "- step " in text and "Outcome:" in text
    summary = json.loads((run_dir / "summary.json").read_text())
    m = summary["mutator"]
    assert m["model"] == "openai/mutator-good" and m["requests"] - m["cache_hits"] == len(srv.requests_text)
    assert m["accepted"] >= 1 and m["max_request_tokens"] <= CAP and m["tokens"] > 0
    children = [row for row in _rows(run_dir) if row["operator"] == "reflect"]
    assert children
    proposed = {text for _, text in srv.proposals}
    for row in children:
        ref = row["detail"]["reflection"]
        assert ref["gene"] in row["detail"]["genes"] and ref["request_tokens"] <= CAP
        assert ref["evidence"]["failures"] and all(f["steps_shown"] for f in ref["evidence"]["failures"])
        assert f"The agent gives up too early.\n{OPEN}\n{ref['proposal']}\n{CLOSE}" in proposed
        from harnevo.harness.genome import get

        assert get(row["harness"], ref["gene"]) == ref["proposal"]  # the child carries the text


def test_bad_proposals_are_rejected_counted_and_the_run_finishes(alfworld_data, tmp_path):
    run_dir = tmp_path / "bad"
    with BadMutator(retry_after="0") as srv:
        r = _evolve(run_dir, alfworld_data, srv, "openai/mutator-bad", 2, tmp_path, population=5)
    assert r.returncode == 0, r.stderr[-3000:]
    served = [k for k, _ in srv.proposals]
    assert set(served) == set(KINDS), served  # every kind of bad answer was given at least once
    m = json.loads((run_dir / "summary.json").read_text())["mutator"]
    # a request asked again (the same parent and gene) is served by the reply cache and rejected again
    assert m["accepted"] == 0 and m["requests"] - m["cache_hits"] >= len(served)
    assert m["rejected_total"] + m["infra_errors"] == m["requests"]
    assert m["infra_errors"] >= served.count("down") >= 1
    reason = {"truncated": "truncated", "empty": "empty", "oversized": "oversized", "unparseable": "unparseable",
              "inject": "unsafe"}
    for kind, why in reason.items():
        assert m["rejected"].get(why, 0) >= sum(served.count(k) for k, w in reason.items() if w == why), (kind, m)
    assert set(m["rejected"]) == set(reason.values())
    rows = _rows(run_dir)
    assert not [row for row in rows if row["operator"] == "reflect"]
    assert max(row["generation"] for row in rows) == 2  # structural mutations carried the run on
    assert (run_dir / "best.yaml").is_file()


# --- units: extraction and validation ---------------------------------------------------------------------------
def test_extract_and_check_reject_each_bad_kind():
    from harnevo.evolve.reflect import Rejected, build_child, check_text, extract
    from harnevo.harness.genome import normalize
    from harnevo.harness.spec import load_harness

    h = normalize(load_harness("bpe_always_on"))
    gene = "prompt.text.instruction"

    def reason(text: str, truncated: bool = False) -> str:
        try:
            new = extract(text, truncated=truncated)
            check_text(h, gene, new)
            build_child(h, gene, new)
        except Rejected as r:
            return r.reason
        return "accepted"

    assert reason(f"{OPEN}\nBe careful.\n{CLOSE}") == "accepted"
    assert reason(f"{OPEN}\nBe careful.\n{CLOSE}", truncated=True) == "truncated"
    assert reason("no markers") == "unparseable"
    assert reason(f"{OPEN} a {CLOSE} {OPEN} b {CLOSE}") == "unparseable"
    assert reason(f"{OPEN}\n \n{CLOSE}") == "empty"
    assert reason(f"{OPEN}{'y' * 4001}{CLOSE}") == "oversized"
    assert reason(f"{OPEN}{{{{ ''.__class__ }}}}{CLOSE}") == "unsafe"
    assert reason(f"{OPEN}{{% set x = 1 %}}{CLOSE}") == "unsafe"
    from harnevo.harness.genome import get

    assert reason(f"{OPEN}\n{get(h, gene)}\n{CLOSE}") == "unchanged"


def test_template_gene_injection_is_refused_by_the_sandbox_check():
    from harnevo.evolve.reflect import Rejected, build_child, check_text, text_genes
    from harnevo.harness.spec import Harness, load_harness

    data = load_harness("react").model_dump(mode="json")
    data.pop("prompt")
    data["templates"] = {"system": "You play a text game. Reply with one command.",
                         "turn": "Task: {{ task }}\n{{ observation }}\nYour command:"}
    h = Harness.from_dict(data, source="hand-written")
    assert text_genes(h) == ["templates.system", "templates.turn"]
    for bad in ("{{ cycler.__init__.__globals__ }}", "{% for c in ().__class__.__base__.__subclasses__() %}{% endfor %}"):
        with pytest.raises(Rejected, match="unsafe"):
            check_text(h, "templates.turn", bad)
    with pytest.raises(Rejected, match="invalid"):  # the sandboxed render refuses an unknown name
        build_child(h, "templates.turn", "{{ no_such_name }}")
    assert build_child(h, "templates.turn", "Goal: {{ task }}\n{{ observation }}").templates["turn"].startswith("Goal")


def test_a_bad_template_or_cap_is_one_line(tmp_path):
    from harnevo.errors import HarnevoError
    from harnevo.evolve.config import parse_config
    from harnevo.evolve.reflect import load_template

    bad = tmp_path / "r.j2"
    bad.write_text("{% for x in %}")
    with pytest.raises(HarnevoError, match="mutator_template"):
        load_template(bad)
    with pytest.raises(HarnevoError, match="mutator_template"):
        load_template(tmp_path / "missing.j2")
    with pytest.raises(HarnevoError, match="needs mutator_model"):
        parse_config({"mutator_prob": 0.3})
    with pytest.raises(HarnevoError, match="mutator_max_tokens"):
        parse_config({"mutator_model": "openai/x", "mutator_max_tokens": 10})
    assert "mutator_model" not in parse_config({}).to_json()  # runs without a mutator keep their config hash


def test_a_mutator_that_is_down_falls_back_to_a_structural_mutation():
    """Unit level: the operator returns None and counts an infra error; amutate then uses another operator."""
    import asyncio
    import random

    from harnevo.evolve.operators import DEFAULT, OperatorContext, amutate
    from harnevo.evolve.reflect import ReflectiveMutator
    from harnevo.harness.genome import normalize
    from harnevo.harness.spec import load_harness
    from harnevo.models import get_model
    from harnevo.models.retry import RetryPolicy
    from harnevo.runtime.trajectory import Trajectory, Turn, episode_key

    class Row:  # the store's view of one lost episode
        ok, success, family, split, game, sample = True, False, "heat", "valid_train", "g1", 0

    h = normalize(load_harness("bpe_always_on"))
    traj = Trajectory(key=episode_key(h.behaviour_id, "sim/bounded", "valid_train", "g1", 0), harness_id=h.id,
                      harness_name=h.name, model="sim/bounded", simulated=True, split="valid_train", game="g1",
                      game_path="", family="heat", sample=0, task="heat some egg", reason="step budget exhausted",
                      steps=2, turns=[Turn(step=1, messages=[], reply="Action: open fridge", action="open fridge",
                                           observation="Nothing happens.")])

    class FakeStore:
        def episodes(self, bid, model):
            return {("valid_train", "g1", 0): Row()}

        def trajectory(self, *a):
            return traj

    os.environ.setdefault("OPENAI_API_KEY", TEST_API_KEY)
    import socket

    with socket.socket() as sock:  # a port nobody listens on: the server is down
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = get_model("openai/nobody", api_base=f"http://127.0.0.1:{port}/v1", timeout_s=5,
                      retry=RetryPolicy(max_retries=1, base_delay_s=0.01))
    mut = ReflectiveMutator(model, FakeStore(), "sim/bounded")
    reg = mut.registry(DEFAULT, 1.0)
    child, _ = asyncio.run(amutate(h, random.Random(0), reg, OperatorContext(generation=1)))
    assert child.operator != "reflect" and mut.stats.infra_errors == 1 and mut.stats.requests == 1
    assert sum(mut.stats.rejected.values()) == 0
