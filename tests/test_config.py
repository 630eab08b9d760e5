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
    assert cfg.env._target_ == "wmrl.envs.wan_env.WanWorldModelEnv"
    # the env scores frames with the selected reward group
    assert OmegaConf.to_container(cfg.env, resolve=True)["reward"]["_target_"] == \
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
    states = json.loads((Path(cfg.env.initial_states) / "tasks.json").read_text())
    instructions = {task_by_name(t).instruction for t in cfg.callbacks.sim_eval.tasks}
    assert set(states["tasks"]) == instructions
    assert len(states["tasks"]) == cfg.callbacks.sim_eval.episodes_per_task == 256
    oracle = fit_cfg("experiment=sim_oracle").env
    assert [oracle.task] == list(cfg.callbacks.sim_eval.tasks)


def test_task_settings_have_one_source():
    """conf/task is read by the env, the rollout, the sim eval and the asset pipeline: one
    override moves them all."""
    over = ["task.name=red_left", "task.max_episode_steps=80", "task.num_states=32",
            "task.eval_seed=3"]
    fit = fit_cfg(*over)
    assert fit.rollout.max_episode_steps == 80 and list(fit.callbacks.sim_eval.tasks) == ["red_left"]
    assert fit.callbacks.sim_eval.episodes_per_task == 32
    assert fit.callbacks.sim_eval.env.eval_seed == 3 and fit.callbacks.sim_eval.env.max_episode_steps == 80
    oracle = fit_cfg("experiment=sim_oracle", *over).env
    assert (oracle.task, oracle.num_states, oracle.eval_seed) == ("red_left", 32, 3)
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        ev = compose("eval", overrides=over)
        wm = compose("train_world_model", overrides=["train_dirs=[]", "out_dir=x", *over])
    assert list(ev.tasks) == ["red_left"] and ev.episodes_per_task == 32
    assert (ev.env.max_episode_steps, ev.env.eval_seed) == (80, 3)
    assert list(wm.tasks) == ["red_left"] and wm.initial_states.num_states == 32
    assert wm.initial_states.eval_seed == 3 and wm.eval.max_episode_steps == 80
    # the defaults: the shipped assets' task and the world model's frame size
    default = fit_cfg()
    assert list(default.callbacks.sim_eval.tasks) == ["red_of_two"]
    assert [default.env.world_model.height, default.env.world_model.width] == \
        list(default.task.image_size) == list(default.callbacks.sim_eval.env.image_size)


def test_smoke_experiment_composes():
    cfg = fit_cfg("experiment=smoke")
    validate(cfg)
    assert cfg.policy.pretrained_path is None and cfg.callbacks.sim_eval is None


def test_sim_oracle_swaps_the_world_model_for_the_simulator():
    cfg = fit_cfg("experiment=sim_oracle")
    validate(cfg)
    assert cfg.env._target_ == "wmrl.envs.sim_env.TabletopSimEnv"
    assert cfg.reward is None and cfg.env.reward is None
    # the same policy, scenes and evaluation as the default run
    assert cfg.policy.pretrained_path.endswith("assets/policy")
    assert cfg.env.num_states == cfg.callbacks.sim_eval.episodes_per_task == 256


def test_unknown_key_is_named():
    with pytest.raises(ConfigCompositionException, match="rollout.num_env"):
        fit_cfg("rollout.num_env=8")


@pytest.mark.parametrize("suite", ["spatial", "object", "goal"])
def test_wovr_experiments_are_rlinfs_recipe(suite, monkeypatch):
    monkeypatch.setenv("WMRL_WOVR_PATH", "/data/wovr")
    cfg = fit_cfg(f"experiment=wovr_libero_{suite}")
    validate(cfg)
    assert cfg.policy.unnorm_key == f"libero_{suite}_no_noops"
    assert cfg.env.world_model.path == "/data/wovr"
    assert cfg.env.initial_states == "/data/wovr/initial_states" and cfg.env.kir_reset
    assert (cfg.env.use_rel_reward, cfg.env.reward_coef, cfg.env.success_threshold,
            cfg.env.num_inference_steps) == (True, 5.0, 0.9, 5)
    r, a = cfg.rollout, cfg.algorithm
    assert (r.num_envs, r.group_size, r.rollout_epochs, r.max_episode_steps, r.temperature) == (
        64, 8, 16, 256, 1.6)
    assert (a.lr, a.kl_coef, a.clip_low, a.clip_high, a.filter_groups, list(a.return_filter)) \
        == (2e-5, 0.0, 0.2, 0.28, False, [0.5, 4.5])
    assert cfg.reward.round and cfg.reward.checkpoint.endswith(
        "taskemb_resnet_rm.pth" if suite == "goal" else "resnet_rm.pth")


def test_return_filter_must_be_low_high():
    with pytest.raises(ConfigError, match=r"algorithm.return_filter.*\[low, high\]"):
        validate(fit_cfg("algorithm.return_filter=[4.5,0.5]"))
    validate(fit_cfg("algorithm.return_filter=[0.5,4.5]"))


def test_hybrid_needs_stages():
    with pytest.raises(ConfigError, match="pipeline_stages >= 2"):
        validate(fit_cfg("rollout.placement=hybrid"))
    with pytest.raises(ConfigError, match="pipeline_stages=3"):
        validate(fit_cfg("rollout.placement=hybrid", "rollout.pipeline_stages=3"))


@pytest.mark.parametrize("group, schema", [("algorithm/grpo", "AlgorithmSchema"),
                                           ("rollout/default", "RolloutSchema")])
def test_group_files_hold_the_schemas_defaults(group, schema):
    """One source per default: a group file states every key of its schema with the schema's
    default (the published WoVR recipe); the tuned values live in experiments. The
    constructors take theirs from the schema too."""
    import inspect

    from wmrl import schema as S
    from wmrl.module import GRPOModule
    from wmrl.rollout.datamodule import RolloutDataModule

    want = S.defaults(getattr(S, schema))
    got = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / f"{group}.yaml"))
    assert got == want
    ctor = GRPOModule if schema == "AlgorithmSchema" else RolloutDataModule
    params = inspect.signature(ctor).parameters
    assert {k: params[k].default for k in want if k in params} == \
        {k: v for k, v in want.items() if k in params}


def test_out_of_range_env_settings_are_refused_and_default_from_the_schema():
    import inspect

    from wmrl.envs.wan_env import WanWorldModelEnv
    from wmrl.schema import WanEnvSchema, defaults

    with pytest.raises(ConfigError, match=r"env.success_threshold=-0.1 is not allowed"):
        validate(fit_cfg("env.success_threshold=-0.1"))
    with pytest.raises(ConfigError, match=r"env.condition_frames=0 is not allowed"):
        validate(fit_cfg("env.condition_frames=0"))
    validate(fit_cfg("env.success_threshold=1.0"))  # the bounds are allowed
    params = inspect.signature(WanWorldModelEnv).parameters
    assert {k: params[k].default for k in defaults(WanEnvSchema)} == defaults(WanEnvSchema)


def test_out_of_range_pace_settings_are_refused_by_the_config_check():
    with pytest.raises(ConfigError, match=r"pace.every_n_steps=-1 is not allowed: must be >= 0"):
        validate(fit_cfg("experiment=pace", "pace.every_n_steps=-1"))
    with pytest.raises(ConfigError,
                       match=r"pace.scenes: Invalid value 'foo', expected one of \[fixed, random\]"):
        validate(fit_cfg("experiment=pace", "pace.scenes=foo"))
    with pytest.raises(ConfigError, match=r"pace.episodes=0 is not allowed: must be > 0"):
        validate(fit_cfg("experiment=pace", "pace.episodes=0"))
    validate(fit_cfg("experiment=pace", "pace.every_n_steps=0", "pace.scenes=fixed"))


def test_pace_file_holds_the_schemas_defaults():
    """conf/pace/default.yaml states every key of PaceSchema; its literal values are the
    schema's defaults (the interpolated ones come from other groups), and Pace's constructor
    takes its defaults from the schema."""
    import inspect

    from wmrl.pipeline.pace import Pace
    from wmrl.schema import PaceSchema, WorldModelDtype, defaults
    from wmrl.world_model.action_wan import _DTYPES

    want = defaults(PaceSchema)
    conf = OmegaConf.load(Path(CONF_DIR) / "pace" / "default.yaml")
    assert set(want) <= set(conf)
    interpolated = {k for k in want if OmegaConf.is_interpolation(conf, k)}
    assert interpolated == {"num_states", "seed", "out_dir"}
    assert {k: conf[k] for k in want if k not in interpolated} == \
        {k: v for k, v in want.items() if k not in interpolated}
    assert set(conf) - set(want) == {"_target_", "tasks", "reward", "world_model", "sim_env"}
    params = inspect.signature(Pace).parameters
    assert {k: params[k].default for k in want} == want
    assert {d.name for d in WorldModelDtype} == set(_DTYPES)
    cfg = fit_cfg("experiment=pace")
    assert cfg.pace.out_dir == "/tmp/wmrl-test/pace" and cfg.pace.num_states == 256
