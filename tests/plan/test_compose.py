"""``wmrl/plan/compose.py``: ``conf/experiment/real_size.yaml`` after the chosen experiment,
under the user's overrides."""

import pytest

from wmrl.errors import ConfigError
from wmrl.plan.compose import compose, options_from
from wmrl.plan.memory import PlanOptions


def test_real_size_experiment_yields_to_user_overrides():
    cfg = compose([])
    assert cfg.trainer.devices == 8 and cfg.rollout.num_envs == 8
    assert cfg.reward.config.widths == [64, 128, 256, 512] and cfg.reward.config.image_size is None
    assert cfg.strategy._target_ == "strategies.HybridShardStrategy"
    assert cfg.algorithm.global_batch == 512  # the default experiment (tabletop) still applies
    user = compose(["reward=topreward", "trainer.devices=4"])
    assert user.trainer.devices == 4
    assert "config" not in user.reward  # a group override replaces the real-size reward whole
    assert user.reward._target_ == "wmrl.rewards.topreward.TOPReward"


def test_real_size_applies_over_a_named_experiment():
    """``experiment=wovr_libero_spatial`` plans that recipe at the real sizes: 8 devices, 8 envs
    per rank, the real-size world model unless ``env=`` names one."""
    cfg = compose(["experiment=wovr_libero_spatial"])
    assert cfg.trainer.devices == 8 and cfg.rollout.num_envs == 8
    assert cfg.rollout.rollout_epochs == 16 and cfg.policy.unnorm_key == "libero_spatial_no_noops"
    assert cfg.env.world_model.path == compose([]).env.world_model.path


def test_options_are_read_by_one_reader_that_names_an_unknown_one():
    """``+plan.<name>`` (and the full-size check's ``+check.<name>``): lists become tuples, an
    unknown name is one ConfigError listing the ones there are."""
    opts = options_from(compose(["+plan.prompt_tokens=128", "+plan.sweep_envs=[1,2]"]))
    assert opts == PlanOptions(prompt_tokens=128, sweep_envs=(1, 2))
    with pytest.raises(ConfigError, match=r"\+plan.nope: unknown; the options are \['device_"):
        options_from(compose(["+plan.nope=1"]))
