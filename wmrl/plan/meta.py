"""The policy, the world model and the reward model built on the meta device.

The policy, the world model (Wan DiT + VAE + action modules) and the reward model are built on
``torch.device("meta")``: every parameter has its shape and dtype, no weight is read or
allocated. An absent checkpoint directory is no error: the architecture then comes from the
config (``policy``: ``openvla_7b_config`` or ``policy.config``; world model: the
``transformer`` / ``vae`` / ``action`` keys of ``env.world_model``). Parameter counts
are sums of ``numel`` over the built modules. Each builder returns the module and where its
architecture came from (the report's ``source`` lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from wmrl.policies.checkpoint import is_policy_dir
from wmrl.policies.openvla_oft import build_policy_meta
from wmrl.rewards.resnet import ResNetSuccessReward, build_classifier
from wmrl.world_model.action_wan import ActionConditioner, ActionWanModel, as_dtype
from wmrl.world_model.files import is_world_model_dir

_BUILT: dict[str, Any] = {}  # meta modules by (builder, config): planning twice builds once


def cached(kind: str, cfg: Any, build):
    """``build()`` once per (``kind``, ``cfg``) in this process; its result every later time."""
    key = kind + json.dumps(cfg, sort_keys=True, default=str)
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


def build_policy(policy_cfg: dict) -> tuple[nn.Module, str]:
    """(the OpenVLA-OFT policy on meta, where its architecture came from)."""
    if policy_cfg.get("_target_") != "wmrl.policies.openvla_oft.build_policy":
        raise ValueError(f"plan: policy._target_ {policy_cfg.get('_target_')!r} is not the "
                         "OpenVLA-OFT policy (wmrl.policies.openvla_oft.build_policy)")
    path = policy_cfg.get("pretrained_path")
    if is_policy_dir(path):
        source = f"config.json of {path}"
    elif policy_cfg.get("config") is not None:
        source = "policy.config"
    elif path:
        source = f"published 7B architecture (no checkpoint at {path})"
    else:
        source = "tiny config"
    args = {k: v for k, v in policy_cfg.items() if k != "_target_"}
    return build_policy_meta(**args), source


def _keep_fp32(model: nn.Module, names: list[str] | None) -> None:
    """Float32 for the parameters under diffusers' ``_keep_in_fp32_modules`` (matched on the
    parameter name's parts), as ``from_pretrained`` loads them."""
    for name, param in model.named_parameters():
        if names and any(n in name.split(".") for n in names):
            param.data = param.data.float()


def build_world_model(wm_cfg: dict) -> tuple[nn.Module, str]:
    """(the action-Wan world model on meta, in its dtypes, eval and frozen; where its
    architecture came from): the config.json files under ``path`` when all three are there,
    else the ``transformer`` / ``vae`` / ``action`` keys of ``env.world_model``."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.utils import logging as dlog

    dt = as_dtype(wm_cfg.get("dtype", "float32"))
    vdt = as_dtype(wm_cfg.get("vae_dtype", "float32"))
    root = Path(str(wm_cfg["path"])) if wm_cfg.get("path") else None
    verbosity = dlog.get_verbosity()
    dlog.set_verbosity_error()  # the "should be kept in float32" notice: handled below
    try:
        if is_world_model_dir(root):
            acfg = json.loads((root / "action" / "config.json").read_text())
            shift = acfg.pop("flow_shift", 5.0)
            with torch.device("meta"):
                transformer = WanTransformer3DModel.from_config(
                    WanTransformer3DModel.load_config(str(root / "transformer")))
                vae = AutoencoderKLWan.from_config(AutoencoderKLWan.load_config(str(root / "vae")))
                model = ActionWanModel(transformer, vae, ActionConditioner(**acfg), shift=shift)
            model.transformer.to(dt)
            model.action.to(dt)
            model.vae.to(vdt)
            source = f"config.json files of {root}"
        else:
            if "transformer" not in wm_cfg or "vae" not in wm_cfg:
                raise ValueError(
                    f"plan: env.world_model.path={wm_cfg.get('path')!r} is not an "
                    "action-Wan directory and the config has no transformer/vae architecture "
                    "to plan from (see conf/env/wan22_ti2v_5b_libero.yaml)")
            vae_cfg = dict(wm_cfg["vae"])
            z = int(vae_cfg.get("z_dim", 16))
            vae_cfg.setdefault("latents_mean", [0.0] * z)  # shapes only: a checkpoint's
            vae_cfg.setdefault("latents_std", [1.0] * z)  # vae/config.json has the real ones
            with torch.device("meta"):
                model = ActionWanModel.from_config({**wm_cfg, "vae": vae_cfg})
            where = f"no checkpoint at {root}" if root is not None else "no path"
            source = f"architecture in env.world_model ({where})"
    finally:
        dlog.set_verbosity(verbosity)
    if dt != torch.float32:
        _keep_fp32(model.transformer, getattr(model.transformer, "_keep_in_fp32_modules", None))
    return model.eval().requires_grad_(False), source


def build_reward(reward_cfg: dict | None) -> tuple[nn.Module | None, Any, str]:
    """(classifier on meta, the reward object, source); (None, None, why) when the reward
    is not a ResNet classifier (a VLM reward is not planned)."""
    if not reward_cfg:
        return None, None, "no reward model"
    from hydra.utils import instantiate

    reward = instantiate(reward_cfg, _convert_="all")  # cheap: the model is built lazily
    if not isinstance(reward, ResNetSuccessReward):
        return None, None, f"{type(reward).__name__} is not planned (ResNet rewards only)"
    source = "reward.config"
    ckpt = Path(reward.checkpoint) if reward.checkpoint else None
    if ckpt is not None and (ckpt / "config.json").is_file():
        reward._adopt_checkpoint_config(json.loads((ckpt / "config.json").read_text()))
        source = f"config.json of {ckpt}"
    with torch.device("meta"):
        model = build_classifier(reward.arch, reward.config)
    return model.eval().requires_grad_(False), reward, source


def nbytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers, each in its own dtype."""
    return sum(t.numel() * t.element_size()
               for t in [*module.parameters(), *module.buffers()])


def numel(module: nn.Module) -> int:
    """A module's parameter count."""
    return sum(p.numel() for p in module.parameters())
