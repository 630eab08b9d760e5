"""The shipped Hydra configs compose, validate and name bad keys."""

import inspect
import json
import re
from pathlib import Path

import pytest
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import get_object
from omegaconf import OmegaConf

from wmrl.config import ConfigError, validate
from wmrl.schema import TARGET_SCHEMAS, defaults
from wmrl.sim.tabletop import TASK_NAMES, camera_names, task_by_name


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


def test_reward_on_imagination_experiment_loads_its_shipped_reward():
    """experiment=reward_on_imagination: the default recipe with the reward of `make assets`
    stage 7 (what check_paths accepts, the fit loads) at the threshold chosen closed loop on
    eval_seed 2: the base policy's imagined success there is the default reward's at 0.99."""
    from wmrl.config import check_paths

    cfg = fit_cfg("experiment=reward_on_imagination")
    validate(cfg)
    check_paths(cfg)
    assert cfg.reward.checkpoint.endswith("assets/reward_on_imagination")
    metrics = json.loads((Path(cfg.reward.checkpoint) / "metrics.json").read_text())
    assert metrics["after"]["rate_matching_threshold"] == 0.95  # open loop: read 25% vs 48% closed
    closed = json.loads((Path(cfg.reward.checkpoint) / "closed_loop_calibration.json").read_text())
    default = closed["default_reward"]
    target = default["wm_success_by_threshold"][str(fit_cfg().env.success_threshold)]  # 0.336
    ours = closed["reward_on_imagination"]["wm_success_by_threshold"]
    nearest = min(ours, key=lambda h: (abs(ours[h] - target), -float(h)))
    assert cfg.env.success_threshold == float(nearest) == 0.8 and ours[nearest] == 89 / 256
    assert metrics["held_out_episodes"] == 64 and metrics["steps"] == 1000
    assert cfg.trainer.max_steps == fit_cfg().trainer.max_steps  # otherwise the default run


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


def test_pipeline_configs_score_at_the_envs_settings():
    """The world-model and reward pipelines replay and score as the fit's env does: its
    success_threshold and num_inference_steps, one override moving them all."""
    env = fit_cfg().env
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        def pipelines(*over):
            wm = compose("train_world_model", overrides=["train_dirs=[]", "out_dir=x", *over])
            fit = compose("fit_reward_to_imagination", overrides=list(over))
            reward = compose("train_reward", overrides=list(over))
            return ((wm.eval.success_threshold, wm.eval.num_inference_steps),
                    (fit.success_threshold, fit.num_inference_steps),
                    reward.trajectories.num_inference_steps)

        assert pipelines() == ((env.success_threshold, env.num_inference_steps),) * 2 + (
            env.num_inference_steps,) == ((0.99, 5), (0.99, 5), 5)
        assert pipelines("env.success_threshold=0.7", "env.num_inference_steps=3") == (
            (0.7, 3), (0.7, 3), 3)


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


@pytest.mark.parametrize("group, schema", [("task/red_of_two", "TaskSchema")])
def test_group_files_hold_the_schemas_defaults(group, schema):
    """A group file states every key of its schema with the schema's default (for task the
    shipped assets' task); the tuned values live in experiments."""
    from wmrl import schema as S

    want = S.defaults(getattr(S, schema))
    got = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / f"{group}.yaml"))
    assert got == want


def test_rollout_defaults_have_one_source():
    """``RolloutConfig`` holds the rollout's defaults: conf/rollout/default.yaml states none
    (it composes the schema's and names each key in a comment), the schema is the config
    class with enums for the choices, ``RolloutDataModule`` takes the settings through it and
    ``WeightSender``'s defaults are ``WeightSyncConfig``'s."""
    from dataclasses import asdict

    from wmrl.rollout.config import RolloutConfig, WeightSyncConfig
    from wmrl.rollout.datamodule import RolloutDataModule
    from wmrl.schema import RolloutSchema

    path = Path(CONF_DIR) / "rollout" / "default.yaml"
    assert OmegaConf.to_container(OmegaConf.load(path)) == {
        "defaults": ["/schema/rollout_defaults@_here_", "_self_"]}
    want = defaults(RolloutSchema)
    assert want.pop("_target_") == "wmrl.rollout.datamodule.RolloutDataModule"
    assert want == asdict(RolloutConfig())
    composed = OmegaConf.to_container(fit_cfg("~experiment").rollout)
    assert composed == {"_target_": "wmrl.rollout.datamodule.RolloutDataModule", **want}
    comments = re.findall(r"^#\s+(\w+)", path.read_text(), re.M)
    assert set(want) | set(want["weight_sync"]) <= set(comments)
    # a setting the config leaves out is the schema's; the constructor repeats no default
    params = inspect.signature(RolloutDataModule).parameters
    assert list(params) == ["policy", "env", "seed", "tracing", "settings"]
    dm = RolloutDataModule(policy={}, env={}, num_envs=4, weight_sync={"delta": True})
    assert dm.settings == RolloutConfig(num_envs=4, weight_sync=WeightSyncConfig(delta=True))
    assert dm.sender.delta and dm.sender.bucket_mb == 256.0
    with pytest.raises(ConfigError, match=r"rollout.num_env: not a setting of the rollout"):
        RolloutDataModule(policy={}, env={}, num_env=4)
    with pytest.raises(ConfigError, match=r"rollout.group_size=1 is not allowed: GRPO needs"):
        RolloutDataModule(policy={}, env={}, group_size=1)
    sender = inspect.signature(get_object("wmrl.rollout.weight_sync.sender.WeightSender"))
    sync = {k: v for k, v in want["weight_sync"].items() if k != "zero_copy"}
    assert {k: sender.parameters[k].default for k in sync} == sync


def test_algorithm_defaults_have_one_source():
    """``AlgorithmConfig`` holds the algorithm's defaults (the published WoVR recipe):
    conf/algorithm/grpo.yaml states none (it composes the schema's, schema/algorithm_defaults,
    and names each key in a comment) and its ``_target_`` is the module wmrl/fit.py builds.
    Both settings classes take a mapping through one helper (``wmrl.errors.settings_of``)."""
    from dataclasses import asdict

    from wmrl.algorithms.config import AlgorithmConfig
    from wmrl.rollout.config import RolloutConfig
    from wmrl.schema import AlgorithmSchema

    path = Path(CONF_DIR) / "algorithm" / "grpo.yaml"
    assert OmegaConf.to_container(OmegaConf.load(path)) == {
        "defaults": ["/schema/algorithm_defaults@_here_", "_self_"]}
    want = defaults(AlgorithmSchema)
    assert want.pop("_target_") == "wmrl.module.GRPOModule"
    assert want == asdict(AlgorithmConfig()) and want["lr"] == 2e-5 and want["kl_coef"] == 0.0
    composed = OmegaConf.to_container(fit_cfg("~experiment").algorithm)
    assert composed == {"_target_": "wmrl.module.GRPOModule", **want}
    assert set(want) <= set(re.findall(r"^#\s+(\w+)", path.read_text(), re.M))
    assert fit_cfg("~experiment", "algorithm.lr=1e-4").algorithm.lr == 1e-4  # no + needed
    assert AlgorithmConfig.of({"_target_": "x", "lr": 1e-4}) == AlgorithmConfig(lr=1e-4)
    with pytest.raises(ConfigError, match=r"^algorithm.lr_rate: not a setting of the algorithm "
                       r"\(wmrl.algorithms.config.AlgorithmConfig: \['adv_estimator', "):
        AlgorithmConfig.of({"lr_rate": 1.0})
    with pytest.raises(ConfigError, match=r"^rollout.weight_sync.deltas: not a setting of the "
                       r"rollout \(wmrl.rollout.config.WeightSyncConfig: \['bucket_mb', "):
        RolloutConfig.of({"weight_sync": {"deltas": True}})


# (Pace takes its settings as one PaceConfig: test_pace_defaults_have_one_source)
@pytest.mark.parametrize("target", sorted({t for _, t in TARGET_SCHEMAS}
                                          - {"wmrl.pace.round.Pace"}))
def test_target_constructors_default_from_their_schema(target):
    """Each ``_target_`` with a schema takes its signature defaults from it (no second literal)."""
    schema = next(s for (_, t), s in TARGET_SCHEMAS.items() if t == target)
    params = inspect.signature(get_object(target)).parameters
    assert {k: params[k].default for k in defaults(schema)} == defaults(schema)


@pytest.mark.parametrize("group", ["policy", "reward"])
def test_target_group_files_state_every_schema_key_and_pass(group):
    """Every shipped policy / reward file passes its schema and states each of its keys, so
    ``policy.dtype=...`` overrides work without ``+`` (the values are the file's own: they
    differ from file to file, the schema holds the constructors' defaults)."""
    for path in sorted((Path(CONF_DIR) / group).glob("*.yaml")):
        cfg = fit_cfg(f"{group}={path.stem}")
        validate(cfg)
        schema = TARGET_SCHEMAS[(group, cfg[group]._target_)]
        assert set(defaults(schema)) <= set(cfg[group]), path.name


@pytest.mark.parametrize("override, match", [
    # the choices are the simulator's own (its task registry, its scene's cameras)
    (["task.name=red_on_table"],
     r"task.name='red_on_table' is not allowed: one of " + re.escape(str(list(TASK_NAMES)))),
    (["task.camera=side"],
     r"task.camera='side' is not allowed: one of " + re.escape(str(list(camera_names())))),
    (["task.image_size=[64]"], r"task.image_size=\[64\] is not allowed: \[H, W\]: two positive"),
    (["task.num_states=0"], r"task.num_states=0 is not allowed: must be > 0"),
    # the task is checked first: the groups that interpolate it do not take the blame
    (["task.max_episode_steps=sixty"], r"^task.max_episode_steps: Value 'sixty'"),
    (["policy.dtype=int8"], r"policy.dtype: Invalid value 'int8', expected one of \[float32, "),
    (["policy.attn_implementation=flash_attention_2"],
     r"policy.attn_implementation: Invalid value 'flash_attention_2', expected one of "
     r"\[eager, sdpa\]"),
    (["policy.fused_ops=tpu"], r"policy.fused_ops='tpu' is not allowed: .*'cpu', 'cuda', 'npu'"),
    (["reward.batch_size=0"], r"reward.batch_size=0 is not allowed: must be > 0"),
    (["reward=resnet_task", "reward.round=maybe"],
     r"reward.round: Value 'maybe' is not a valid bool"),
    (["reward=topreward", "reward.threshold=1.5"],
     r"reward.threshold=1.5 is not allowed: must be in \[0, 1\]"),
    (["reward=topreward", "reward.window=0"], r"reward.window=0 is not allowed: must be > 0"),
    (["reward=topreward", "reward.dtype=half"],
     r"reward.dtype: Invalid value 'half', expected one of \[auto, "),
])
def test_bad_task_policy_reward_settings_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        validate(fit_cfg(*override))


def test_task_policy_reward_bounds_are_allowed():
    validate(fit_cfg("task.name=red_left", "task.camera=front", "task.image_size=[32,48]"))
    validate(fit_cfg("policy.fused_ops=npu:0", "policy.dtype=bf16",
                     "policy.attn_implementation=eager"))
    validate(fit_cfg("reward=topreward", "reward.threshold=1.0", "reward.dtype=bfloat16"))


def test_out_of_range_env_settings_are_refused():
    with pytest.raises(ConfigError, match=r"env.success_threshold=-0.1 is not allowed"):
        validate(fit_cfg("env.success_threshold=-0.1"))
    with pytest.raises(ConfigError, match=r"env.condition_frames=0 is not allowed"):
        validate(fit_cfg("env.condition_frames=0"))
    validate(fit_cfg("env.success_threshold=1.0"))  # the bounds are allowed


def test_out_of_range_pace_settings_are_refused_by_the_config_check():
    with pytest.raises(ConfigError, match=r"pace.every_n_steps=-1 is not allowed: must be >= 0"):
        validate(fit_cfg("experiment=pace", "pace.every_n_steps=-1"))
    with pytest.raises(ConfigError,
                       match=r"pace.scenes: Invalid value 'foo', expected one of \[fixed, random\]"):
        validate(fit_cfg("experiment=pace", "pace.scenes=foo"))
    with pytest.raises(ConfigError, match=r"pace.episodes=0 is not allowed: must be > 0"):
        validate(fit_cfg("experiment=pace", "pace.episodes=0"))
    validate(fit_cfg("experiment=pace", "pace.every_n_steps=0", "pace.scenes=fixed"))


def test_pace_defaults_have_one_source():
    """``PaceConfig`` holds PACE's scalar defaults: conf/pace/default.yaml states none (it
    composes the schema's, schema/pace_defaults, names each key in a comment, and sets only the
    keys another group owns: interpolations and the simulator's kwargs), the schema is the
    config class with enums for the choices and ``Pace`` takes its settings through it, so a
    new default is one edit (the field)."""
    from dataclasses import asdict

    from wmrl.pace.round import Pace
    from wmrl.schema import PaceConfig, PaceSchema

    path = Path(CONF_DIR) / "pace" / "default.yaml"
    conf = OmegaConf.load(path)
    assert list(conf.defaults) == ["/schema/pace_defaults@_here_", "_self_"]
    own = {k for k in conf if k != "defaults"}
    assert own == {"temperature", "num_states", "tasks", "success_threshold",
                   "num_inference_steps", "reward", "world_model", "seed", "out_dir", "sim_env"}
    assert all(OmegaConf.is_interpolation(conf, k) for k in own - {"tasks", "sim_env"})
    want = defaults(PaceSchema)
    assert want.pop("_target_") == "wmrl.pace.round.Pace"
    assert want == asdict(PaceConfig()) and want["episodes"] == 96 and want["steps"] == 300
    comments = dict(re.findall(r"^#[ \t]+(\w+)[ \t]+(.*)$", path.read_text(), re.M))
    assert set(want) - own <= set(comments)
    for key, line in comments.items():  # a default a comment reasons about is the schema's
        if line.startswith("default "):
            assert OmegaConf.create(f"v: {line.split()[1].rstrip(':')}").v == want[key], key
    cfg = fit_cfg("experiment=pace")
    composed = OmegaConf.to_container(cfg.pace, resolve=True)
    assert {k: composed[k] for k in want if k not in own} == \
        {k: v for k, v in want.items() if k not in own}
    assert composed["_target_"] == "wmrl.pace.round.Pace"
    assert cfg.pace.out_dir == "/tmp/wmrl-test/pace" and cfg.pace.num_states == 256
    assert fit_cfg("experiment=pace", "pace.episodes=64").pace.episodes == 64  # no + needed
    # the simulator samples as the rollout does: the tabletop run's 1.0, and it follows
    assert cfg.pace.temperature == cfg.rollout.temperature == 1.0
    assert fit_cfg("experiment=pace", "rollout.temperature=1.6").pace.temperature == 1.6
    # Pace repeats no default: a setting left out is PaceConfig's, an unknown one refused
    params = inspect.signature(Pace).parameters
    assert list(params) == ["world_model", "tasks", "sim_env", "reward", "settings"]
    assert PaceConfig.of({"_target_": "wmrl.pace.round.Pace", "episodes": 8}) == \
        PaceConfig(episodes=8)
    with pytest.raises(ConfigError, match=r"^pace.episode: not a setting of the pace "
                       r"\(wmrl.schema.PaceConfig: \['batch_size', "):
        PaceConfig.of({"episode": 8})
    with pytest.raises(ConfigError, match=r"^pace.buffer_rounds=0 is not allowed: must be > 0"):
        PaceConfig(buffer_rounds=0)
