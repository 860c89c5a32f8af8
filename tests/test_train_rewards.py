"""The cost-aware reward (EvoHarness-RL) on its own: order of outcomes, wins-only efficiency, capped charge."""

from __future__ import annotations

import pytest

from harnevo.train.config import RewardWeights
from harnevo.train.rewards import cost_aware_reward, episode_reward, episode_stat, reward_terms


def test_a_clean_win_beats_a_win_with_many_meta_actions_beats_a_loss():
    clean = episode_reward(success=True, steps=12, max_steps=50, meta_actions=0)
    spammy = episode_reward(success=True, steps=12, max_steps=50, meta_actions=25)
    loss = episode_reward(success=False, steps=50, max_steps=50, meta_actions=0)
    assert clean > spammy > loss
    assert clean == pytest.approx(10 + (1 - 12 / 50))
    assert loss == 0.0


def test_efficiency_applies_to_wins_only_and_rewards_fewer_steps():
    assert reward_terms(success=False, steps=3, max_steps=50)["efficiency"] == 0.0
    assert episode_reward(success=False, steps=3, max_steps=50) == episode_reward(success=False, steps=49, max_steps=50)
    assert episode_reward(success=True, steps=5, max_steps=50) > episode_reward(success=True, steps=40, max_steps=50)
    assert reward_terms(success=True, steps=60, max_steps=50)["efficiency"] == 0.0  # never negative


def test_meta_action_charge_is_capped_and_invalid_replies_are_charged():
    w = RewardWeights()
    assert (w.success, w.efficiency, w.spam, w.spam_cap, w.invalid) == (10.0, 1.0, 0.1, 10, 0.1)
    at_cap = episode_reward(success=False, steps=50, max_steps=50, meta_actions=10)
    beyond = episode_reward(success=False, steps=50, max_steps=50, meta_actions=200)
    assert at_cap == beyond == pytest.approx(-1.0)
    assert episode_reward(success=False, steps=9, max_steps=50, meta_actions=3) == pytest.approx(-0.3)
    assert episode_reward(success=False, steps=9, max_steps=50, invalid_replies=4) == pytest.approx(-0.4)
    heavy = RewardWeights(spam=1.0, spam_cap=2, invalid=0.0)
    assert episode_reward(success=True, steps=50, max_steps=50, meta_actions=7, invalid_replies=9,
                          weights=heavy) == pytest.approx(10 - 2)


def test_trl_form_reads_the_rollout_columns():
    f = cost_aware_reward(RewardWeights())
    cols = dict(success=[1, 1, 0], steps=[10, 10, 50], max_steps=[50, 50, 50], meta_actions=[0, 30, 0],
                invalid_replies=[0, 0, 2])
    r = f(["a", "b", "c"], **cols, trainer_state=None)
    assert r[0] > r[1] > r[2] and r[2] == pytest.approx(-0.2) and f.__name__ == "cost_aware"
    assert episode_stat("steps")(["a", "b", "c"], **cols) == [10.0, 10.0, 50.0]
