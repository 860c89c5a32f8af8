"""Racing: the stratified race order and the bound that decides whether a candidate plays on."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from harnevo.envs.games import Game
from harnevo.evolve.racing import RacePlan, race_order, should_continue, upper_bound
from harnevo.runtime.summary import wilson_rate

# family sizes of the workplace's official splits (valid_seen, valid_unseen, the valid_train slice), then
# equal families and a lopsided little set
SPLITS = [dict(clean=27, cool=25, heat=16, look=13, pick=35, pick2=24),
          dict(clean=31, cool=21, heat=23, look=18, pick=24, pick2=17),
          dict(clean=37, cool=28, heat=25, look=19, pick=46, pick2=45),
          dict(clean=10, cool=10, heat=10, look=10, pick=10, pick2=10),
          dict(heat=2, look=7, pick=1)]


def _games(counts: dict[str, int]) -> list[Game]:
    return [Game("valid_seen", f"{f}-task/trial_{i:03d}", f"/data/{f}/{i}/game.tw-pddl", f)
            for f, n in sorted(counts.items()) for i in range(n)]


def _worst_share_gap(order: list[Game]) -> float:
    """The largest |games of a family in a prefix - the family's share of that prefix|."""
    sizes = Counter(g.family for g in order)
    seen: Counter = Counter()
    worst = 0.0
    for m, g in enumerate(order, 1):
        seen[g.family] += 1
        worst = max(worst, max(abs(seen[f] - m * sizes[f] / len(order)) for f in sizes))
    return worst


@pytest.mark.parametrize("counts", SPLITS)
def test_race_order_is_a_permutation_balanced_in_every_prefix(counts):
    games = _games(counts)
    for seed in range(4):
        order = race_order(games, seed)
        assert sorted(order) == sorted(games)
        assert _worst_share_gap(order) < 1.0  # each family within one game of its share, in every prefix


def test_equal_families_interleave_round_robin():
    order = race_order(_games(SPLITS[3]), 5)
    for start in range(0, 60, 6):
        assert len({g.family for g in order[start:start + 6]}) == 6


def test_race_order_is_deterministic_and_independent_of_input_order():
    games = _games(SPLITS[0])
    shuffled = list(games)
    random.Random(1).shuffle(shuffled)
    assert race_order(games, 7) == race_order(shuffled, 7) == race_order(list(reversed(games)), 7)
    assert race_order(games, 7) != race_order(games, 8)
    order = race_order(games, 7)
    pick = [g for g in order if g.family == "pick"]
    assert pick != sorted(pick)  # shuffled within the family by the seed
    prefix = Counter(g.family for g in order[:12])  # a minibatch of 12 from 140 games
    assert all(abs(prefix[f] - 12 * n / 140) < 1 for f, n in SPLITS[0].items()) and sum(prefix.values()) == 12


def test_unequal_families_are_not_dealt_out_equally():
    order = race_order(_games(SPLITS[4]), 0)
    assert [g.family for g in order].count("look") == 7
    assert Counter(g.family for g in order[:5])["look"] >= 3  # 7 of 10 games: most of any prefix


# --- the bound ------------------------------------------------------------------------------------------------
def test_a_candidate_that_wins_the_minibatch_is_always_promoted():
    for total in (13, 48, 140, 3553):
        for minibatch in (1, 4, 12):
            for bar in (0.0, 0.3, 0.9, 0.999, 1.0):
                assert should_continue(minibatch, minibatch, total, bar), (total, minibatch, bar)


def test_a_hopeless_candidate_stops_after_the_minibatch():
    assert not should_continue(0, 12, 140, 0.5)
    assert not should_continue(1, 12, 140, 0.6)
    assert not should_continue(2, 24, 200, 0.4)
    assert should_continue(0, 12, 140, 0.2)  # a low bar: 0/12 could still be 20% over all games
    assert should_continue(0, 0, 140, 1.0)  # nothing played: anything is possible


def test_the_decision_is_monotone_in_successes_and_in_the_bar():
    for total in (20, 140):
        for played in range(1, total):
            for bar in (0.1, 0.35, 0.6, 0.85):
                decisions = [should_continue(s, played, total, bar) for s in range(played + 1)]
                assert decisions == sorted(decisions), (total, played, bar)  # False... then True...
            for s in (0, played // 2, played):
                bars = [should_continue(s, played, total, b / 20) for b in range(21)]
                assert bars == sorted(bars, reverse=True)


def test_the_bound_is_between_the_exact_part_and_the_hard_bound_and_exact_at_the_end():
    total = 140
    for played in range(0, total + 1, 7):
        for s in range(played + 1):
            u = upper_bound(s, played, total)
            hard = (s + total - played) / total
            assert s / total - 1e-12 <= u <= hard + 1e-12
            if 0 < played < total:
                # more conservative than mixing the exact part with Wilson's bound on the rest
                mixed = s / total + (total - played) / total * wilson_rate(s / played, played)[1]
                assert u >= mixed - 1e-12
                assert u >= s / played - 1e-12  # never below the observed rate
    assert upper_bound(84, 140, 140) == 0.6
    # Wilson's interval with the finite-population correction: n_eff = played * (total - 1) / (total - played)
    assert upper_bound(3, 12, 140) == pytest.approx(wilson_rate(3 / 12, 12 * 139 / 128)[1])
    assert upper_bound(60, 100, 140) == pytest.approx(wilson_rate(0.6, 100 * 139 / 40)[1])
    assert upper_bound(0, 1, 140) == pytest.approx(wilson_rate(0.0, 139 / 139)[1])
    assert upper_bound(2, 2, 3) == 1.0 and upper_bound(0, 2, 3) == pytest.approx(1 / 3)  # the hard bound binds
    assert upper_bound(6, 12, 140, confidence=0.99) > upper_bound(6, 12, 140)
    assert not should_continue(140, 140, 140, 0.0)  # nothing left to play


def _race(outcomes: list[int], bar: float, plan: RacePlan) -> tuple[int, bool]:
    total = len(outcomes)
    for played in plan.checkpoints(total):
        if played < total and not should_continue(sum(outcomes[:played]), played, total, bar):
            return played, True
    return total, False


def test_racing_rarely_stops_a_candidate_better_than_the_bar_and_saves_episodes_on_bad_ones():
    rng, plan, total, runs = random.Random(0), RacePlan(12, 12), 140, 400

    def trial(rate: float, bar: float) -> tuple[float, float]:
        stopped = played = 0
        wins = round(rate * total)
        for _ in range(runs):
            outcomes = [1] * wins + [0] * (total - wins)
            rng.shuffle(outcomes)
            n, stop = _race(outcomes, bar, plan)
            stopped, played = stopped + stop, played + n
        return stopped / runs, played / runs

    assert trial(0.7, 0.6)[0] < 0.025  # 10 points above the bar: rarely stopped (measured ~0.6%)
    assert trial(0.65, 0.6)[0] < 0.08  # 5 points above (~3%)
    assert trial(0.6, 0.6)[0] < 0.3  # at the bar (~18%; mixing the bounds naively stops half of them)
    stopped, played = trial(0.3, 0.6)
    assert stopped == 1.0 and played < 25  # hopeless: stopped early (~16 of 140 games)
    stopped, played = trial(0.45, 0.6)
    assert stopped > 0.95 and played < 50


def test_bad_arguments_are_refused():
    for args in [(5, 4, 10), (1, 11, 10), (-1, 3, 10), (0, 0, 0)]:
        with pytest.raises(ValueError):
            upper_bound(*args)
    with pytest.raises(ValueError, match="confidence"):
        should_continue(1, 2, 10, 0.5, confidence=1.0)
    with pytest.raises(ValueError, match="bar"):
        should_continue(1, 2, 10, float("nan"))


def test_race_plan_checkpoints_and_validation():
    assert RacePlan(12, 12).checkpoints(40) == [12, 24, 36, 40]
    assert RacePlan(12, 5).checkpoints(8) == [8]
    assert RacePlan(1, 100).checkpoints(3) == [1, 3]
    assert RacePlan(4, 4).checkpoints(0) == []
    for bad in [(0, 1), (1, 0), (2.5, 1), (True, 2)]:
        with pytest.raises(ValueError, match="race"):
            RacePlan(*bad)


def test_the_bar_stops_what_cannot_join_the_front():
    from harnevo.evolve.candidates import Bar

    front = [(1.0, lambda n: {"tokens": 1000.0}), (0.6, lambda n: {"tokens": 400.0})]
    open_bar = Bar.of_front(front, margin=1.0)  # no floor: only dominance
    assert open_bar.dominating({"tokens": 1200.0}, 12) == 1.0  # both members are as cheap: the best counts
    assert open_bar.dominating({"tokens": 500.0}, 12) == 0.6  # only the cheap member is as cheap
    assert open_bar.dominating({"tokens": 100.0}, 12) is None  # cheaper than the whole front
    # costlier than a member at 100%: even 12 of 12 can only tie it, so it stops
    assert not open_bar.should_continue(12, 12, 48, {"tokens": 1200.0})
    # between the members: it must be able to beat 60%
    assert open_bar.should_continue(6, 12, 48, {"tokens": 500.0})
    assert not open_bar.should_continue(1, 12, 48, {"tokens": 500.0})
    # cheaper than every member: never stopped without a floor ...
    assert open_bar.should_continue(0, 12, 48, {"tokens": 100.0})
    # ... but with the default margin it must be able to come within 0.1 of the best
    bar = Bar.of_front(front, margin=0.1)
    assert bar.floor == pytest.approx(0.9)
    assert not bar.should_continue(2, 12, 48, {"tokens": 100.0})
    assert bar.should_continue(12, 12, 48, {"tokens": 100.0})
    assert not Bar.of_front([], margin=0.1).should_continue(12, 12, 12, {})  # nothing left to play
    assert Bar.of_front([], margin=0.1).should_continue(0, 12, 48, {})  # an empty front stops nothing


def test_a_strict_bar_must_be_beaten_not_tied():
    assert should_continue(12, 12, 48, 1.0)  # reaching 100% is possible
    assert not should_continue(12, 12, 48, 1.0, strict=True)  # but beating it is not
    assert should_continue(11, 12, 48, 0.9, strict=True)


def test_costs_are_compared_on_the_same_games():
    from harnevo.evolve.candidates import Bar

    # the member's first 12 games are long (1500 tokens each), its average over all 48 is 1000
    bar = Bar.of_front([(1.0, lambda n: {"tokens": 1500.0 if n <= 12 else 1000.0})], margin=1.0)
    assert bar.dominating({"tokens": 1200.0}, 12) is None  # cheaper than the member on the same 12 games
    assert bar.should_continue(12, 12, 48, {"tokens": 1200.0})
    assert bar.dominating({"tokens": 1200.0}, 24) == 1.0  # costlier on the first 24


def _cand(success: float, tokens: float, games: int, stopped: bool) -> dict:
    return {"success": success, "tokens_per_episode": tokens, "cost_per_episode": 0.0, "meta_per_episode": 0.0,
            "games": games, "complete": not stopped, "stopped_early": stopped}


@pytest.mark.parametrize("objectives", [["success", "tokens"], ["success"]])
def test_raced_out_candidates_do_not_survive(objectives):
    from harnevo.evolve.config import parse_config
    from harnevo.evolve.loop import Evolution, fitness_of

    cfg = parse_config({"model": "sim/bounded", "population": 4, "objectives": objectives})
    evo = Evolution(cfg, store=None, evaluator=None, seeds=[])
    evo.stats = {"full_a": _cand(1.0, 9000, 48, False), "full_b": _cand(0.96, 8000, 48, False),
                 "full_c": _cand(0.9, 7000, 48, False), "full_d": _cand(0.85, 7500, 48, False),
                 # a minibatch that failed cheaply, and one that looked perfect on its 12 games
                 "out_cheap": _cand(0.42, 3000, 12, True), "out_lucky": _cand(1.0, 8500, 12, True)}
    ids = sorted(evo.stats)
    # without the rule the toolbox would keep a raced-out candidate in place of a full evaluation
    plain = evo.toolbox.select_survivors(ids, {b: fitness_of(evo.stats[b], objectives) for b in ids}, 4)
    assert {"out_cheap", "out_lucky"} & set(plain)
    assert sorted(evo._select(ids)) == ["full_a", "full_b", "full_c", "full_d"]
    evo.cfg = parse_config({"model": "sim/bounded", "population": 6, "objectives": objectives})
    assert sorted(evo._select(ids)) == ["full_a", "full_b", "full_c", "full_d"]  # places left stay empty
    evo.cfg = parse_config({"model": "sim/bounded", "population": 4, "objectives": objectives})
    evo.stats["full_e"] = _cand(0.5, 9500, 48, False)  # more full evaluations than places: the worst goes
    kept = evo._select(sorted(evo.stats))
    assert sorted(kept) == ["full_a", "full_b", "full_c", "full_d"]


@pytest.mark.parametrize("racing", [False, True])
def test_full_evaluations_below_the_floor_do_not_survive_with_or_without_racing(racing):
    """A cheap harness that gives up early plays every game (no racing, or racing let it through) and ends far
    below the front: NSGA-II alone would keep it as the front's cheap end; the floor drops it in both modes."""
    import asyncio
    from types import SimpleNamespace

    from harnevo.evolve.candidates import Bar, CandidateStats
    from harnevo.evolve.config import parse_config
    from harnevo.evolve.loop import Evolution, fitness_of

    def played(bid: str, wins: int, tokens: float) -> CandidateStats:
        return CandidateStats(bid, games=48, successes=wins, tokens=tokens * 48, complete=True)

    class Evaluator:  # the statistics the evaluator hands back after every game was played
        order = [None] * 48
        stopped_by_budget = False

        async def evaluate_all(self, hs, bar):
            return {h.behaviour_id: results[h.behaviour_id] for h in hs}

    results = {"quitter": played("quitter", 10, 1500.0), "good": played("good", 46, 8500.0)}
    cfg = parse_config({"model": "sim/bounded", "population": 4, "objectives": ["success", "tokens"],
                        "racing": racing})
    evo = Evolution(cfg, store=None, evaluator=Evaluator(), seeds=[])
    evo.stats = {"full_a": _cand(1.0, 9000, 48, False), "full_b": _cand(0.96, 8000, 48, False),
                 "full_c": _cand(0.93, 9500, 48, False)}
    bar = Bar.of_front([(1.0, lambda n: {"tokens": 9000.0}), (0.96, lambda n: {"tokens": 8000.0})], margin=0.1)
    asyncio.run(evo._evaluate([SimpleNamespace(behaviour_id=b) for b in results], bar))
    assert evo.stats["quitter"]["below_floor"] and not evo.stats["good"]["below_floor"]  # floor 0.9
    ids = sorted(evo.stats)
    plain = evo.toolbox.select_survivors(ids, {b: fitness_of(evo.stats[b], cfg.objectives) for b in ids}, 4)
    assert "quitter" in plain  # the cheapest: on the front, kept by NSGA-II in place of full_c
    assert sorted(evo._select(ids)) == ["full_a", "full_b", "full_c", "good"]
