"""The advantage-estimator registry (wmrl/algorithms/advantages.py), by hand."""

import pytest
import torch

from wmrl.algorithms.advantages import ESTIMATORS, estimate_advantages
from wmrl.algorithms.config import AlgorithmConfig
from wmrl.errors import ConfigError

RETURNS = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 2.0, 2.0])  # 2 groups of 4


def test_rloo_subtracts_the_mean_of_the_others():
    # group 0: A_i = (4 R_i - 2) / 3; group 1: (4 R_i - 8) / 3
    adv = estimate_advantages("rloo", RETURNS, 4)
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3,
                                                  4 / 3, -4 / 3, 0.0, 0.0]))
    # = Dr.GRPO's centred return x n / (n - 1)
    dr = estimate_advantages("grpo", RETURNS, 4, scale="none")
    torch.testing.assert_close(adv, dr * 4 / 3)


def test_rloo_over_the_valid_episodes():
    # group 0 without ep2: ep0 = 1 - mean(0, 1) = 0.5, ep1 = 0 - mean(1, 1) = -1, ep3 = 0.5;
    # group 1 with one valid episode: no baseline, 0
    valid = torch.tensor([True, True, False, True, False, False, True, False])
    adv = estimate_advantages("rloo", RETURNS, 4, valid=valid)
    assert adv.tolist() == [0.5, -1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_grpo_is_the_group_normalised_return():
    adv = estimate_advantages("grpo", torch.tensor([1.0, 0.0, 2.0, 2.0]), 2)
    assert adv[:2].tolist() == pytest.approx([0.5 / 0.5 ** 0.5, -0.5 / 0.5 ** 0.5], abs=1e-5)
    assert adv[2:].tolist() == [0.0, 0.0]


def test_the_registry_is_the_configs_choice_list():
    assert sorted(ESTIMATORS) == ["grpo", "rloo"]
    assert AlgorithmConfig(adv_estimator="rloo").adv_estimator == "rloo"
    with pytest.raises(ConfigError, match=r"algorithm.adv_estimator='ppo' is not allowed: "
                                          r"one of \['grpo', 'rloo'\]"):
        AlgorithmConfig(adv_estimator="ppo")
    with pytest.raises(ValueError, match="adv_estimator='ppo'"):
        estimate_advantages("ppo", RETURNS, 4)
    with pytest.raises(ConfigError, match="algorithm.lr_rate: not a setting"):
        AlgorithmConfig.of({"lr_rate": 1.0})
