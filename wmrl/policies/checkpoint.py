"""OpenVLA-OFT checkpoints on disk: the published HF layout, read and written.

``config.json`` (OpenVLAConfig fields; wmrl-only settings under its ``"wmrl"`` key),
``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json`` with keys
``vision_backbone.featurizer.*`` (DINOv2), ``vision_backbone.fused_featurizer.*`` (SigLIP),
``projector.fc{1,2,3}.*``, ``language_model.{model.*,lm_head.weight}``, plus
``dataset_statistics.json`` and the tokenizer files. Loading is strict: a missing, unexpected
or mis-shaped key is an error naming it.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import re
from collections.abc import Iterable, Mapping

import torch
from torch import nn
from tqdm import tqdm

from wmrl.io.atomic import atomic_dir
from wmrl.weights.safetensors_shards import INDEX_NAME, write_sharded

# openvla-oft saves its continuous heads beside the backbone as "<module>--<step>_checkpoint.pt"
# (e.g. action_head--150000_checkpoint.pt); its loader finds them by name the same way.
_SIDE_HEAD_RE = re.compile(
    r"^(action_head|proprio_projector|noisy_action_projector)--.*checkpoint.*\.pt$")


def is_policy_dir(path) -> bool:
    """Whether ``path`` is a policy checkpoint directory: it holds ``config.json`` (the
    architecture, all the plan reads). Its weights are checked where they load
    (``load_safetensors_dir``, ``wmrl.asset_checks``)."""
    return bool(path) and os.path.isfile(os.path.join(str(path), "config.json"))


def check_token_checkpoint(path: str) -> None:
    """Refuse openvla-oft's L1-regression (and diffusion) releases.

    Those keep a separate continuous action head (and proprio projector) beside the backbone; the
    backbone's keys load into this token model, but its actions would come from the language
    model's (untrained) action-token logits, not from the head the checkpoint was trained with.
    """
    found = sorted(f for f in os.listdir(path) if _SIDE_HEAD_RE.match(f))
    if found:
        raise ValueError(
            f"{path} is an openvla-oft continuous-action release (L1 regression or diffusion): "
            f"it keeps {', '.join(found)} beside the backbone. wmrl's OpenVLA-OFT policy "
            "decodes discrete action tokens from the language model head, so this checkpoint "
            "would load by key but not reproduce its actions (the separate action head and "
            "proprio projector would be ignored). Use a discrete action-token OpenVLA-OFT "
            "checkpoint instead: RLinf's OpenVLA-OFT LIBERO SFT/RL releases (e.g. "
            "Haozhan72/Openvla-oft-SFT-libero-spatial-traj1 or the RL-trained RLinf "
            "OpenVLA-OFT LIBERO checkpoints). If this directory's backbone really is a token "
            "model, move those files out of it.")


def read_pretrained_config(path: str, overrides: dict | None = None) -> dict:
    """The policy config of a local checkpoint directory: ``config.json`` with the entries of
    ``dataset_statistics.json`` (they win) and ``preprocessor_config.json`` pixel statistics,
    plus ``overrides`` of the wmrl settings. Refuses openvla-oft's continuous-action releases
    (``check_token_checkpoint``)."""
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise FileNotFoundError(f"{cfg_path} not found: pretrained_path must be a local "
                                "OpenVLA-OFT checkpoint directory")
    check_token_checkpoint(path)
    with open(cfg_path) as f:
        config = json.load(f)
    if config.get("model_type") not in ("openvla", "prismatic", None):
        raise ValueError(f"{cfg_path}: model_type {config.get('model_type')!r} is not openvla")
    stats_path = os.path.join(path, "dataset_statistics.json")
    if os.path.isfile(stats_path):  # RLinf/OFT: the file's entries override config norm_stats
        with open(stats_path) as f:
            config["norm_stats"] = {**(config.get("norm_stats") or {}), **json.load(f)}
    pre_path = os.path.join(path, "preprocessor_config.json")
    wm = dict(config.get("wmrl") or {})
    if os.path.isfile(pre_path) and "image_means" not in wm:
        with open(pre_path) as f:
            pre = json.load(f)
        if "means" in pre and "stds" in pre:
            wm["image_means"], wm["image_stds"] = pre["means"], pre["stds"]
    wm.update(overrides or {})
    config["wmrl"] = wm
    return config


def write_pretrained(path: str, config: dict,
                     state_dict: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
                     tokenizer=None, max_shard_bytes: int = 5 * 2**30) -> None:
    """A policy in the upstream layout at ``path``, atomically (``wmrl.io.atomic.atomic_dir``:
    built in a temp dir, then renamed; only over a policy or an empty folder): ``config.json``
    (``config`` as an OpenVLA config), ``dataset_statistics.json``, the tokenizer's files and
    the weights in shards of ``max_shard_bytes``. ``state_dict``: a mapping, or (name, tensor)
    pairs made lazily (a peak of about one shard)."""
    with atomic_dir(path, "policy") as tmp:
        cfg = copy.deepcopy(config)
        cfg["model_type"] = "openvla"
        cfg["architectures"] = ["OpenVLAForActionPrediction"]
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(tmp, "dataset_statistics.json"), "w") as f:
            json.dump(cfg.get("norm_stats") or {}, f, indent=2)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
        # own CPU copies: safetensors refuses tensors that share storage
        items = state_dict.items() if isinstance(state_dict, Mapping) else state_dict
        write_sharded(tmp, ((k, v.detach().to("cpu").contiguous().clone())
                            for k, v in items), max_shard_bytes)


LOAD_PROGRESS_BYTES = 1 << 30  # checkpoints from 1 GiB load with a progress bar


def load_safetensors_dir(model: nn.Module, directory: str,
                         ignore_key_prefixes: tuple[str, ...] = ()) -> None:
    """Strict load: a missing / unexpected key or a wrong shape is an error naming the key."""
    from safetensors import safe_open

    index = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
    else:
        files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
        if not files:
            raise FileNotFoundError(f"no {INDEX_NAME} or *.safetensors in {directory}")
        weight_map = {}
        for fn in files:
            with safe_open(fn, framework="pt") as f:
                weight_map.update({k: os.path.basename(fn) for k in f.keys()})
    weight_map = {k: v for k, v in weight_map.items()
                  if not any(k.startswith(p) for p in ignore_key_prefixes)}
    params = model.state_dict(keep_vars=True)
    missing = sorted(set(params) - set(weight_map))
    unexpected = sorted(set(weight_map) - set(params))
    if missing or unexpected:
        raise KeyError(f"checkpoint {directory} does not match the model: missing keys "
                       f"{missing[:10]}{' ...' if len(missing) > 10 else ''}, unexpected keys "
                       f"{unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}")
    by_file: dict[str, list[str]] = {}
    for k, fn in weight_map.items():
        by_file.setdefault(fn, []).append(k)
    size = sum(params[k].numel() * params[k].element_size() for k in weight_map)
    # a bar for a real checkpoint (a 7B policy loads for minutes), none for the tiny ones
    bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"[load] {directory}",
               mininterval=2.0, leave=False, disable=size < LOAD_PROGRESS_BYTES)
    with torch.no_grad(), bar:
        for fn, keys in by_file.items():
            with safe_open(os.path.join(directory, fn), framework="pt") as f:
                for k in keys:
                    shape = tuple(f.get_slice(k).get_shape())
                    if shape != tuple(params[k].shape):
                        raise ValueError(f"checkpoint key {k!r} has shape {shape}, the model "
                                         f"expects {tuple(params[k].shape)}")
                    params[k].copy_(f.get_tensor(k))
                    bar.update(params[k].numel() * params[k].element_size())
