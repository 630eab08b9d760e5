"""A policy from its config, with a fit checkpoint's weights over it (``scripts/eval.py``,
``calibrate_threshold.py``, ``imagined_vs_real.py``).

The checkpoint is a Lightning ``.ckpt`` written by ``scripts/fit.py`` (GRPOModule state dict,
keys ``policy.<...>``, read with ``torch.load(weights_only=True)``) or a sharded folder
(``strategies.load_full_state_dict``). One trained with another policy config (its
``wmrl_config["policy"]``) is refused before any model loads.
"""

from __future__ import annotations

import os
import warnings

import torch

from wmrl.asset_checks import check_policy
from wmrl.build import build
from wmrl.config import CONFIG_KEY, ConfigError, check_checkpoint, is_dcp_folder
from wmrl.weights.lora import has_lora, is_adapter_key

PREFIX = "policy."


class CheckpointKeyError(ConfigError, KeyError):
    """The checkpoint lacks the configured policy's keys: a config error (a KeyError, as it
    was before ConfigError)."""

    __str__ = ConfigError.__str__  # not KeyError's quoted repr


def policy_state_from_ckpt(path: str) -> dict[str, torch.Tensor]:
    """The policy's weights from a Lightning ``.ckpt`` (or a bare state dict) file, or from a
    sharded checkpoint folder (``strategies.load_full_state_dict``: full tensors, one process)."""
    if is_dcp_folder(path):
        from strategies.checkpoint import load_full_state_dict  # (loads Lightning: only here)

        state = load_full_state_dict(path)
    elif not os.path.isfile(path):
        raise ConfigError(f"ckpt_path {path} does not exist (or is a folder without .metadata)")
    else:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise ConfigError(f"ckpt_path {path}: expected a dict with 'state_dict', got {type(ckpt)}")
    policy = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
    if not policy:
        raise CheckpointKeyError(f"ckpt_path {path}: no '{PREFIX}*' keys (found e.g. "
                                 f"{sorted(state)[:5]}); is it a GRPOModule checkpoint from "
                                 "scripts/fit.py?")
    return policy


def check_ckpt(path: str, policy_cfg: dict) -> None:
    """Before any model loads: ``path`` is a Lightning checkpoint trained with ``policy_cfg``
    (else ``ConfigError`` naming the keys that differ); one written before checkpoints
    recorded their config passes with a warning."""
    if check_checkpoint(path, policy_cfg)[CONFIG_KEY] is None:
        warnings.warn(f"ckpt_path {path} records no run config (written before {CONFIG_KEY}): "
                      "cannot check that it was trained with this policy config", stacklevel=2)


def load_policy(policy_cfg, ckpt_path: str | None = None):
    """The configured policy in eval mode, with ``ckpt_path``'s weights when given (a LoRA
    fit's: its adapters over the base the config builds, ``policy/lora=...`` as in the fit)."""
    if isinstance(dict(policy_cfg).get("pretrained_path"), str):
        check_policy(dict(policy_cfg))  # whole weights of the config's shapes (headers only)
    if ckpt_path:
        check_ckpt(ckpt_path, dict(policy_cfg))
    policy = build(policy_cfg)
    if ckpt_path:
        result = policy.load_state_dict(policy_state_from_ckpt(ckpt_path), strict=False)
        # a LoRA fit's checkpoint holds its adapters; the frozen base came from the config
        missing = [k for k in result.missing_keys if not has_lora(policy) or is_adapter_key(k)]
        if missing or result.unexpected_keys:
            raise CheckpointKeyError(
                f"ckpt_path {ckpt_path} does not match the configured policy: missing "
                f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}; use the "
                "same policy config as the fit run")
    return policy.eval()
