"""The shipped Hydra configs compose, validate and name bad keys."""

import json
from pathlib import Path

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from wmrl.config import ConfigError, validate
from wmrl.sim.tabletop import task_by_name


def fit_cfg(*overrides):
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return compose("fit", overrides=["run_dir=/tmp/wmrl-test", *overrides])


def test_default_config_composes_and_validates():
    cfg = fit_cfg()
    validate(cfg)
    assert cfg.policy._target_ == "wmrl.policies.openvla_oft.build_policy"
    assert cfg.world_model._target_ == "wmrl.envs.wan_env.WanWorldModelEnv"
    # the env scores frames with the selected reward group
    assert OmegaConf.to_container(cfg.world_model, resolve=True)["reward"]["_target_"] == \
        cfg.reward._target_
    assert cfg.rollout.num_envs % cfg.rollout.group_size == 0
    # the default run uses the shipped assets and evaluates in the simulator
    assert cfg.policy.pretrained_path.endswith("assets/policy")
    assert cfg.reward.checkpoint.endswith("assets/reward")
    assert cfg.callbacks.sim_eval.episodes_per_task >= 200


def test_sim_eval_task_is_the_shipped_world_models_task():
    """The simulator evaluates the task whose scenes the world model starts from (the
    instruction of every shipped initial state), on as many scenes as it holds."""
    cfg = fit_cfg()
    states = json.loads((Path(cfg.world_model.initial_states) / "tasks.json").read_text())
    instructions = {task_by_name(t).instruction for t in cfg.callbacks.sim_eval.tasks}
    assert set(states["tasks"]) == instructions
    assert len(states["tasks"]) == cfg.callbacks.sim_eval.episodes_per_task == 256
    oracle = fit_cfg("experiment=sim_oracle").world_model
    assert [oracle.task] == list(cfg.callbacks.sim_eval.tasks)


def test_smoke_experiment_composes():
    cfg = fit_cfg("experiment=smoke")
    validate(cfg)
    assert cfg.policy.pretrained_path is None and cfg.callbacks.sim_eval is None


def test_sim_oracle_swaps_the_world_model_for_the_simulator():
    cfg = fit_cfg("experiment=sim_oracle")
    validate(cfg)
    assert cfg.world_model._target_ == "wmrl.envs.sim_env.TabletopSimEnv"
    assert cfg.reward is None and cfg.world_model.reward is None
    # the same policy, scenes and evaluation as the default run
    assert cfg.policy.pretrained_path.endswith("assets/policy")
    assert cfg.world_model.num_states == cfg.callbacks.sim_eval.episodes_per_task == 256


def test_unknown_key_is_named():
    with pytest.raises(ConfigCompositionException, match="rollout.num_env"):
        fit_cfg("rollout.num_env=8")


def test_hybrid_needs_stages():
    with pytest.raises(ConfigError, match="pipeline_stages >= 2"):
        validate(fit_cfg("rollout.placement=hybrid"))
    with pytest.raises(ConfigError, match="pipeline_stages=3"):
        validate(fit_cfg("rollout.placement=hybrid", "rollout.pipeline_stages=3"))
