"""wmrl.asset_checks: damaged model files (truncated, not safetensors, a config.json that does
not describe its weights, an empty initial-states directory, a .pth that is not a state dict)
and absent accelerators are refused in one line ``<key>: <path>: <what>; <what to do>``,
reading headers only. Through ``check_paths`` with the shipped assets' damaged copies:
tests/test_bad_input.py (and scripts/fit.py's exit 2)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from lightning.pytorch.accelerators import CUDAAccelerator
from omegaconf import OmegaConf
from safetensors.torch import save_file

from wmrl import asset_checks as ac
from wmrl.build import ASSETS_DIR
from wmrl.config import ConfigError
from wmrl.envs.initial_states import write_initial_states
from wmrl.world_model.action_wan import ActionConditioner

SHIPPED_REWARD = {"_target_": "wmrl.rewards.resnet.ResNetSuccessReward", "config": None}


def copy(tmp_path: Path, sub: str) -> Path:
    """A copy of a shipped asset folder (wmrl/assets/<sub>) to damage."""
    return Path(shutil.copytree(os.path.join(ASSETS_DIR, sub), tmp_path / sub.replace("/", "_")))


def edit_json(path: Path, **changes) -> None:
    cfg = json.loads(path.read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = cfg
        for p in parents:
            node = node[p]
        node[leaf] = value
    path.write_text(json.dumps(cfg))


def truncate(path: Path, keep: float = 0.5) -> None:
    os.truncate(path, int(path.stat().st_size * keep))


def refused(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        fn(*args, **kwargs)
    line = str(err.value)
    assert "\n" not in line
    return line


def policy_cfg(path) -> dict:
    return {"_target_": "wmrl.policies.openvla_oft.build_policy", "pretrained_path": str(path),
            "unnorm_key": "tabletop", "overrides": {"top_k": 0, "gripper": "libero"}}


# ---- safetensors headers -------------------------------------------------------------------------
def test_safetensors_header_shapes_and_every_kind_of_damage(tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"a": torch.zeros(2, 3), "b": torch.ones(4, dtype=torch.int64)}, str(good))
    assert ac.safetensors_shapes(good, "k", "fix") == {"a": (2, 3), "b": (4,)}
    data = good.read_bytes()
    bad = {"cut": data[:-1],  # the last tensor lacks a byte: safe_open sees the file uncovered
           "padded": data + b"\0" * 8,
           "header_cut": data[:20],
           "empty": b"",
           "text": b"not a safetensors file at all" * 10}
    for name, content in bad.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(content)
        line = refused(ac.safetensors_shapes, path, "policy.pretrained_path", "copy it again")
        assert line.startswith(f"policy.pretrained_path: {path}: not a whole safetensors file")
        assert line.endswith("truncated, damaged or another format; copy it again"), line
    pickled = tmp_path / "pickled.safetensors"
    torch.save({"a": torch.zeros(2)}, pickled)
    assert "not a whole safetensors file" in refused(ac.safetensors_shapes, pickled, "k", "f")


# ---- policy ------------------------------------------------------------------------------------------
def test_shipped_policy_passes_and_damage_is_named(tmp_path):
    ac.check_policy(policy_cfg(os.path.join(ASSETS_DIR, "policy")))
    pol = copy(tmp_path, "policy")
    edit_json(pol / "config.json", text_config__hidden_size=96)
    line = refused(ac.check_policy, policy_cfg(pol))
    assert line.startswith(f"policy.pretrained_path: {pol}/config.json: does not match the "
                           f"weights in {pol}/model.safetensors.index.json (")
    assert "language_model.lm_head.weight [576, 64] (config: [576, 96])" in line
    assert line.endswith("restore the config.json that came with these weights, or copy the "
                         "checkpoint again, or point policy.pretrained_path at an intact one")
    edit_json(pol / "config.json", text_config__hidden_size=64, text_config__num_hidden_layers=3)
    assert "9 tensors missing: language_model.model.layers.2." in refused(
        ac.check_policy, policy_cfg(pol))
    edit_json(pol / "config.json", text_config__num_hidden_layers=2)
    ac.check_policy(policy_cfg(pol))  # restored
    assert "tensors missing: proprio_projector." in refused(  # the policy's overrides count
        ac.check_policy, {**policy_cfg(pol), "overrides": {"proprio_dim": 8}})
    line = refused(ac.check_policy, {**policy_cfg(pol), "unnorm_key": "libero"})
    assert line == (f"policy.unnorm_key: {pol}: unnorm_key 'libero' not in dataset statistics; "
                    "available: ['tabletop']; set policy.unnorm_key to a dataset of its "
                    "dataset_statistics.json")


def test_policy_index_and_files(tmp_path):
    pol = copy(tmp_path, "policy")
    index = pol / "model.safetensors.index.json"
    edit_json(index, weight_map__extra=next(iter(json.loads(index.read_text())["weight_map"]
                                                 .values())))
    line = refused(ac.check_policy, policy_cfg(pol))
    assert line.startswith(f"policy.pretrained_path: {index}: lists ['extra'] in model-00001")
    index.unlink()  # no index: every *.safetensors, as load_safetensors_dir reads them
    ac.check_policy(policy_cfg(pol))
    (pol / "model-00001-of-00001.safetensors").write_bytes(b"\x00garbage" * 100)
    assert "model-00001-of-00001.safetensors: not a whole safetensors file" in refused(
        ac.check_policy, policy_cfg(pol))
    (pol / "model-00001-of-00001.safetensors").unlink()
    assert "no *.safetensors" in refused(ac.check_policy, policy_cfg(pol))
    (pol / "config.json").write_text("{not json")
    assert f"{pol}/config.json: not a readable JSON file" in refused(
        ac.check_policy, policy_cfg(pol))


# ---- world model ---------------------------------------------------------------------------------
def test_action_module_shapes_are_action_conditioners():
    cfg = {"dim": 24, "text_dim": 8, "action_dim": 5, "actions_per_latent": 3,
           "num_text_tokens": 2}
    with torch.device("meta"):
        real = ActionConditioner(**cfg)
    assert ac.action_module_shapes(cfg) == {k: tuple(v.shape)
                                            for k, v in real.state_dict().items()}


@pytest.mark.parametrize("sub", ["transformer/diffusion_pytorch_model.safetensors",
                                 "vae/diffusion_pytorch_model.safetensors",
                                 "action/action_modules.safetensors"])
def test_world_model_truncated_weights(tmp_path, sub):
    wm = copy(tmp_path, "world_model")
    truncate(wm / sub)
    line = refused(ac.check_world_model, str(wm))
    assert line.startswith(f"env.world_model.path: {wm / sub}: not a whole safetensors file")


def test_world_model_configs_against_weights(tmp_path):
    ac.check_world_model(os.path.join(ASSETS_DIR, "world_model"))
    wm = copy(tmp_path, "world_model")
    edit_json(wm / "transformer/config.json", num_layers=3)
    line = refused(ac.check_world_model, str(wm))
    assert line.startswith(f"env.world_model.path: {wm}/transformer/config.json: does not "
                           "match the weights in ") and "tensors missing: blocks.2." in line
    edit_json(wm / "transformer/config.json", num_layers=2)
    edit_json(wm / "vae/config.json", base_dim=16)
    assert f"{wm}/vae/config.json: does not match" in refused(ac.check_world_model, str(wm))
    edit_json(wm / "vae/config.json", base_dim=8)
    edit_json(wm / "action/config.json", action_dim=8)
    line = refused(ac.check_world_model, str(wm))
    assert f"{wm}/action/config.json: does not match" in line
    assert "action_mlp1.0.weight [64, 7] (config: [64, 8])" in line
    edit_json(wm / "action/config.json", action_dim=7, dim=32)
    assert "action dim 32 != transformer heads x head dim 64" in refused(
        ac.check_world_model, str(wm))
    shutil.rmtree(wm / "vae")
    assert "missing ['vae/config.json']" in refused(ac.check_world_model, str(wm))


# ---- initial states ------------------------------------------------------------------------------
def test_initial_states(tmp_path):
    ac.check_initial_states(os.path.join(ASSETS_DIR, "initial_states"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(ac.check_initial_states, str(empty)) == (
        f"env.initial_states: {empty}: an empty directory, expected initial_states.safetensors "
        "and tasks.json; point env.initial_states at a directory written by "
        "wmrl.envs.initial_states.write_initial_states (scripts/import_rlinf.py writes "
        "<out>/initial_states)")
    none = tmp_path / "none"
    none.mkdir()
    save_file({"frames": torch.zeros(0, 8, 8, 3, dtype=torch.uint8),
               "task_ids": torch.zeros(0, dtype=torch.int64)}, str(none / "initial_states.safetensors"))
    (none / "tasks.json").write_text('{"format": "wmrl.initial_states/v1", "tasks": []}')
    assert "frames (0, 8, 8, 3), expected [N >= 1, H, W, 3]" in refused(
        ac.check_initial_states, str(none))
    two = write_initial_states(tmp_path / "two", torch.zeros(2, 8, 8, 3, dtype=torch.uint8),
                               ["a", "b"])
    ac.check_initial_states(str(two))
    assert "no context_frames" in refused(ac.check_initial_states, str(two), kir_reset=True)
    edit_json(two / "tasks.json", tasks=["a"])
    assert "tasks.json: 1 tasks for 2 states" in refused(ac.check_initial_states, str(two))
    (two / "tasks.json").unlink()
    assert f"{two}: no tasks.json" in refused(ac.check_initial_states, str(two))


# ---- reward --------------------------------------------------------------------------------------
def test_reward_checkpoints(tmp_path):
    ac.check_reward({**SHIPPED_REWARD, "checkpoint": os.path.join(ASSETS_DIR, "reward")})
    rew = copy(tmp_path, "reward")
    edit_json(rew / "config.json", widths=[8, 16, 32, 128])
    assert f"reward.checkpoint: {rew}/config.json: does not match the weights" in refused(
        ac.check_reward, {**SHIPPED_REWARD, "checkpoint": str(rew)})
    edit_json(rew / "config.json", widths=[8, 16, 32, 64], arch="resnet_task")
    assert "arch 'resnet_task'" in refused(ac.check_reward,
                                           {**SHIPPED_REWARD, "checkpoint": str(rew)})
    truncate(rew / "model.safetensors", 0.9)
    assert f"{rew}/model.safetensors: not a whole safetensors file" in refused(
        ac.check_reward, {**SHIPPED_REWARD, "checkpoint": str(rew)})


def test_reward_pth_must_be_a_state_dict_of_tensors(tmp_path):
    from safetensors.torch import load_file

    state = load_file(os.path.join(ASSETS_DIR, "reward", "model.safetensors"))
    tiny = {**SHIPPED_REWARD, "config": {"widths": [8, 16, 32, 64]}}
    good = tmp_path / "rm.pth"
    torch.save({"model_state_dict": state}, good)
    ac.check_reward({**tiny, "checkpoint": str(good)})
    line = refused(ac.check_reward, {**SHIPPED_REWARD, "checkpoint": str(good)})
    assert line.startswith(f"reward.checkpoint: reward.config: does not match the weights in "
                           f"{good} (")
    assert "set reward.config to the sizes these weights were trained with" in line
    for name, obj, what in [("list.pth", [torch.zeros(1)], "holds a list, not a state dict"),
                            ("mixed.pth", {"epoch": 3, "net.0.0.weight": torch.zeros(1)},
                             "not a state dict of tensors ('epoch' is int)")]:
        torch.save(obj, tmp_path / name)
        line = refused(ac.check_reward, {**tiny, "checkpoint": str(tmp_path / name)})
        assert line.startswith(f"reward.checkpoint: {tmp_path / name}: {what}"), line
    junk = tmp_path / "junk.pth"
    junk.write_text("junk")
    assert "torch.load(weights_only=True) cannot read it" in refused(
        ac.check_reward, {**tiny, "checkpoint": str(junk)})


# ---- accelerator ---------------------------------------------------------------------------------
def trainer(**kw):
    return OmegaConf.create({"trainer": kw})


def test_accelerator_present(monkeypatch):
    ac.check_accelerator(trainer(accelerator="cpu", devices=4))  # CPU processes: any number
    ac.check_accelerator(trainer(accelerator="auto"))
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))
    assert refused(ac.check_accelerator, trainer(accelerator="cuda", devices=1)).startswith(
        "trainer.accelerator=cuda: this machine has no cuda device (Lightning: CUDAAccelerator "
        "not available); use trainer.accelerator=cpu")
    assert "no npu device" in refused(ac.check_accelerator, trainer(accelerator="npu"))
    assert "is not a Lightning accelerator" in refused(ac.check_accelerator,
                                                       trainer(accelerator="cuda0"))
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(CUDAAccelerator, "auto_device_count", staticmethod(lambda: 2))
    ac.check_accelerator(trainer(accelerator="gpu", devices=2))
    assert refused(ac.check_accelerator, trainer(accelerator="cuda", devices=8)).startswith(
        "trainer.devices=8 is more than the 2 cuda device(s) this machine shows")


def test_eval_refuses_a_damaged_policy_before_loading_it(tmp_path):
    """scripts/eval.py's loader checks the policy folder the same way the fit does."""
    from wmrl.eval.policy_checkpoint import load_policy

    pol = copy(tmp_path, "policy")
    truncate(pol / "model-00001-of-00001.safetensors")
    policy_cfg = {"_target_": "wmrl.policies.openvla_oft.build_policy",
                  "pretrained_path": str(pol), "unnorm_key": "tabletop"}
    line = refused(load_policy, policy_cfg)
    assert line.startswith(f"policy.pretrained_path: {pol}/model-00001-of-00001.safetensors: "
                           "not a whole safetensors file"), line
