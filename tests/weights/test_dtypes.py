"""One dtype table (``strategies.dtypes``): every setting that names a dtype takes the same
names, torch's and the short aliases, for the same torch dtype, and refuses any other name
with a message naming the key and the names allowed."""

import pytest
import torch
from omegaconf import OmegaConf
from tiny_models import tiny_world_model_config

import strategies.dtypes
import wmrl.weights.dtypes
from strategies import HybridShardStrategy
from wmrl.algorithms.config import AlgorithmConfig
from wmrl.config import policy_config_diff
from wmrl.policies.openvla_oft import build_policy
from wmrl.rewards.topreward import TOPReward
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.schema import check
from wmrl.world_model.action_wan import build_world_model
from wmrl.world_model.objective import FlowMatchObjective

SPELLINGS = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def test_wmrl_reads_the_strategies_table():
    assert strategies.dtypes.DTYPES == SPELLINGS
    assert wmrl.weights.dtypes.DTYPES == {"float32": "float32", "fp32": "float32",
                                  "bfloat16": "bfloat16", "bf16": "bfloat16",
                                  "float16": "float16", "fp16": "float16"}
    assert strategies.dtypes.dtype_name("bf16") == strategies.dtypes.dtype_name(
        torch.bfloat16) == "bfloat16"


def checked(key: str, name: str) -> None:
    """The fit config's schema check of ``key=name`` (a spec of the key's group alone)."""
    group, rest = key.split(".", 1)
    targets = {"policy": "wmrl.policies.openvla_oft.build_policy",
               "env": "wmrl.envs.wan_env.WanWorldModelEnv", "pace": "wmrl.pace.round.Pace",
               "reward": "wmrl.rewards.topreward.TOPReward"}
    spec = {"_target_": targets[group]} if group in targets else {}
    check(OmegaConf.create({group: OmegaConf.merge(spec, OmegaConf.from_dotlist([f"{rest}={name}"]))}))


# each setting: what its config check and its loader make of a name (None: checked only)
SETTINGS = {
    "policy.dtype": lambda n: next(build_policy(dtype=n).parameters()).dtype,
    "env.world_model.dtype": lambda n: build_world_model(
        {**tiny_world_model_config(), "dtype": n}).transformer.dtype,
    "env.world_model.vae_dtype": lambda n: next(build_world_model(
        {**tiny_world_model_config(), "vae_dtype": n}).vae.parameters()).dtype,
    "rollout.policy_dtype": lambda n: RolloutDataModule(policy={}, env={},
                                                        policy_dtype=n).policy_dtype,
    "pace.dtype": None,
    "reward.dtype": lambda n: TOPReward("tiny", dtype=n)._torch_dtype(),
    "algorithm.optimizer_dtype": lambda n: getattr(torch, AlgorithmConfig(
        optimizer_dtype=n).optimizer_dtype),
}


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_every_config_dtype_takes_every_spelling(key):
    for name, dtype in SPELLINGS.items():
        checked(key, name)
        if SETTINGS[key] is not None and name in ("fp32", "bf16"):  # a build per dtype
            assert SETTINGS[key](name) == dtype, (key, name)
    with pytest.raises(ValueError) as err:
        checked(key, "bf17")
    assert key in str(err.value) and "bf17" in str(err.value), str(err.value)
    assert all(name in str(err.value) for name in SPELLINGS), str(err.value)


def test_the_library_settings_take_the_same_names():
    for name, dtype in SPELLINGS.items():
        assert HybridShardStrategy(param_dtype=name, reduce_dtype=name).param_dtype == dtype
        FlowMatchObjective(timestep_dtype=name)
    for make, key in ((lambda: HybridShardStrategy(param_dtype="bf17"), "strategy.param_dtype"),
                      (lambda: FlowMatchObjective(timestep_dtype="bf17"),
                       "objective.timestep_dtype"),
                      (lambda: AlgorithmConfig(optimizer_dtype="bf17"),
                       "algorithm.optimizer_dtype")):
        with pytest.raises(ValueError, match=rf"{key}='bf17' is not allowed: one of \['float32', "
                                             r"'fp32', 'bfloat16', 'bf16', 'float16', 'fp16'\]"):
            make()


def test_a_checkpoint_trained_in_bfloat16_resumes_with_bf16():
    """Two spellings of one dtype are the same policy config; two dtypes are not."""
    assert policy_config_diff({"dtype": "bfloat16"}, {"dtype": "bf16"}) == []
    assert policy_config_diff({"dtype": "float32"}, {"dtype": "bf16"}) == [
        "policy.dtype: 'float32' in the checkpoint, 'bf16' given"]
