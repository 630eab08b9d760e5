"""A fit's result out of wmrl (``scripts/export.py``): the trained policy in the layout the fit
started from, or the world model PACE refined during the fit.

Policy (``export_policy``): the checkpoint's ``policy.*`` tensors are written into the source
directory's layout (``policy.pretrained_path`` of the run's recorded config): the same
safetensors shard files with the same tensor names, shapes, dtypes and file metadata, the same
``model.safetensors.index.json``, and every other file of the source copied (config.json,
dataset_statistics.json, tokenizer and processor files). openvla-oft, RLinf and LIBERO tooling
read it as they read the source; a key the source lacks, or one it has that the checkpoint
lacks, is an error. A model card (``README.md``, ``huggingface_hub.ModelCard``) names the base
checkpoint, the recipe, the run's config and the simulator evaluations of the run with their
95% intervals.

World model (``export_world_model``): the source world model (``env.world_model.path``) with
the transformer and action weights of the checkpoint's PACE state, as a world-model directory
``WanWorldModelEnv`` and ``ActionWanModel.from_pretrained`` load.

The output directory is written whole or not at all (``wmrl.io.atomic.atomic_dir``), and only
over a new or empty folder or an earlier export of the same kind unless ``force``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml
from huggingface_hub import ModelCard, ModelCardData
from safetensors import safe_open
from safetensors.torch import save_file

from strategies.checkpoint import load_full_state_dict
from wmrl.build import build
from wmrl.config import CONFIG_KEY, DCP_META, read_checkpoint_meta
from wmrl.errors import ConfigError, one_line
from wmrl.io.atomic import atomic_dir, check_output_dir
from wmrl.measure.stats import rate_with_interval
from wmrl.weights.lora import (
    add_lora,
    config_from_json,
    is_adapter_key,
    merged_state_dict,
    peft_names,
    write_adapter,
)
from wmrl.weights.safetensors_shards import INDEX_NAME
from wmrl.world_model.action_wan import ActionWanModel

POLICY_PREFIX = "policy."
# safetensors' dtype names -> torch's: each tensor is written in its source file's dtype
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                      "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32,
                      "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                      "BOOL": torch.bool}


def read_checkpoint(path: str) -> dict[str, Any]:
    """A checkpoint that scripts/fit.py wrote: a Lightning file (tensors memory-mapped) or a
    sharded DCP folder (its model tensors gathered whole in this process, and its
    ``meta.pt``; the optimizer state is not read)."""
    if not os.path.exists(path):
        raise ConfigError(f"{path} does not exist: pass a checkpoint that scripts/fit.py wrote "
                          "(<run_dir>/checkpoints/last.ckpt)")
    read_checkpoint_meta(path, "checkpoint")  # the fit's own check: a Lightning file or folder
    try:
        if os.path.isdir(path):
            full = torch.load(os.path.join(path, DCP_META), map_location="cpu", weights_only=True)
            return {**full, "state_dict": load_full_state_dict(path)}
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError) as err:
        raise ConfigError(f"{path} is not a readable checkpoint ({type(err).__name__}: "
                          f"{one_line(err, 200)}): pass one that scripts/fit.py wrote") from None


def policy_state(ckpt: dict, path: str) -> dict[str, torch.Tensor]:
    """The checkpoint's policy tensors, named as in the policy's own files."""
    state = {k[len(POLICY_PREFIX):]: v for k, v in ckpt["state_dict"].items()
             if k.startswith(POLICY_PREFIX)}
    if not state:
        raise ConfigError(f"{path} holds no policy weights (no 'policy.*' tensors in its "
                          "state_dict): pass a checkpoint of a wmrl GRPO fit")
    return state


def weight_files(source: Path) -> dict[str, list[str]]:
    """Shard file -> its tensor names, from the index (or each *.safetensors file)."""
    index = source / INDEX_NAME
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
    else:
        weight_map = {}
        for fn in sorted(source.glob("*.safetensors")):
            with safe_open(str(fn), framework="pt") as f:
                weight_map.update({k: fn.name for k in f.keys()})
    if not weight_map:
        raise ConfigError(f"{source}: no {INDEX_NAME} or *.safetensors: not a policy directory")
    files: dict[str, list[str]] = {}
    for k, fn in weight_map.items():
        files.setdefault(fn, []).append(k)
    return files


def export_policy(ckpt_path: str, out: str, source: str | None = None,
                  adapter: bool = False, force: bool = False) -> dict:
    """Write the checkpoint's policy into ``out`` in the layout of ``source`` (default: the
    run's ``policy.pretrained_path``); returns a summary (tensors, files, source). A LoRA fit
    (``policy.lora``): the adapters are folded into the base read from ``source``, or with
    ``adapter`` written alone as a peft adapter directory (no base needed). ``force``: replace
    an ``out`` that holds other files."""
    check_output_dir(out, "lora_adapter" if adapter else "policy", force)
    ckpt = read_checkpoint(ckpt_path)
    state = policy_state(ckpt, ckpt_path)
    cfg = ckpt.get(CONFIG_KEY) or {}
    policy_cfg = dict(cfg.get("policy") or {})
    lora = any(is_adapter_key(k) for k in state)
    if adapter and not lora:
        raise ConfigError(f"{ckpt_path}: --adapter, but its policy carries no LoRA adapter "
                          "(the fit ran with policy.lora null): export the whole policy")
    if lora and "lora_config" not in ckpt:
        raise ConfigError(f"{ckpt_path}: LoRA tensors but no lora_config entry: not a "
                          "checkpoint of a wmrl fit")
    if adapter:
        summary = write_adapter(out, config_from_json(ckpt["lora_config"]), peft_names(state),
                                base_model=source or policy_cfg.get("pretrained_path"))
        return {**summary, "adapter": True}
    source = source or policy_cfg.get("pretrained_path")
    if not source:
        raise ConfigError(f"{ckpt_path}: its run config names no policy.pretrained_path (a "
                          "policy built from a config): pass --source DIR, the layout to write")
    src = Path(source)
    if not src.is_dir():
        raise ConfigError(f"the source policy {src} (the run's policy.pretrained_path) is not "
                          "on this machine: pass --source DIR, a copy of it")
    files = weight_files(src)
    if lora:
        state = merged_policy_state(policy_cfg, str(src), ckpt["lora_config"], state)
    want = {k for keys in files.values() for k in keys}
    missing, extra = sorted(want - set(state)), sorted(set(state) - want)
    if missing or extra:
        raise ConfigError(f"{ckpt_path}: its policy does not match {src} (missing "
                          f"{missing[:5]}, extra {extra[:5]}): pass the --source it was "
                          "trained from")
    with atomic_dir(out, "policy") as tmp:
        for fn, keys in files.items():
            with safe_open(str(src / fn), framework="pt") as f:
                meta = f.metadata()
                tensors = {}
                for k in keys:
                    like = f.get_slice(k)
                    shape = tuple(like.get_shape())
                    if tuple(state[k].shape) != shape:
                        raise ConfigError(f"{ckpt_path}: policy tensor {k!r} has shape "
                                          f"{tuple(state[k].shape)}, {src / fn} has {shape}")
                    tensors[k] = state[k].to(SAFETENSORS_DTYPES[like.get_dtype()]).contiguous()
            save_file(tensors, str(tmp / fn), metadata=meta)
        for item in src.iterdir():
            if item.suffix != ".safetensors" and item.name != "README.md":
                (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        model_card(ckpt_path, ckpt, cfg, str(src)).save(str(tmp / "README.md"))
    return {"out": out, "source": str(src), "tensors": len(want), "files": sorted(files)}


def merged_policy_state(policy_cfg: dict, source: str, lora_config: str,
                        adapters: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base policy from ``source`` with the checkpoint's adapters folded in, in the
    base's names (``W + s * B A``, wmrl/weights/lora.py)."""
    spec = {**policy_cfg, "pretrained_path": source, "lora": None,
            "gradient_checkpointing": False, "fused_ops": False}
    policy = build(spec)
    add_lora(policy, config=config_from_json(lora_config))
    missing, unexpected = policy.load_state_dict(adapters, strict=False)
    missing = [k for k in missing if is_adapter_key(k)]
    if missing or unexpected:
        raise ConfigError(f"the checkpoint's adapters do not fit {source} (missing "
                          f"{missing[:3]}, unexpected {unexpected[:3]}): pass the --source "
                          "it was trained from")
    return merged_state_dict(policy)


def eval_rows(ckpt_path: str) -> list[dict]:
    """The run's simulator evaluations (``<run_dir>/sim_eval/history.jsonl`` beside
    ``<run_dir>/checkpoints/``), if the checkpoint still sits in its run dir."""
    hist = Path(ckpt_path).resolve().parent.parent / "sim_eval" / "history.jsonl"
    if not hist.is_file():
        return []
    return [json.loads(line) for line in hist.read_text().splitlines() if line.strip()]


def _rate(row: dict, prefix: str, episodes: int) -> str | None:
    if f"{prefix}/success" not in row or not episodes:
        return None
    return rate_with_interval(round(row[f"{prefix}/success"] * episodes), episodes)


def model_card(ckpt_path: str, ckpt: dict, cfg: dict, source: str) -> ModelCard:
    """README.md: base checkpoint, recipe, evaluations with 95% Wilson intervals, the config."""
    step = int(ckpt.get("global_step", 0))
    algo, rollout = cfg.get("algorithm") or {}, cfg.get("rollout") or {}
    env = cfg.get("env") or {}
    task = (cfg.get("task") or {}).get("name", "the run's task")
    sim_eval = ((cfg.get("callbacks") or {}).get("sim_eval") or {})
    episodes = int(sim_eval.get("episodes_per_task") or 0) * max(len(sim_eval.get("tasks")
                                                                     or [task]), 1)
    lines = []
    for row in eval_rows(ckpt_path):
        seen = _rate(row, "sim", episodes)
        unseen = [f"{k.split('/')[0]}: {_rate(row, k.split('/')[0], episodes)}" for k in row
                  if k.startswith("sim_") and k.endswith("/success")]
        if seen:
            lines.append(f"| {row['step']} | {seen} | {'; '.join(unseen)} |")
    evals = ("| step | simulator success [95% Wilson] | other scene sets |\n|---|---|---|\n"
             + "\n".join(lines)) if lines else "No simulator evaluation was found beside the checkpoint."
    data = ModelCardData(library_name="wmrl",
                         tags=["robotics", "vla", "openvla-oft", "grpo", "world-model", "wmrl"])
    content = f"""---
{data.to_yaml()}
---

# {Path(source).name}, GRPO-trained in a world model (wmrl, step {step})

The OpenVLA-OFT policy of `{source}` after {step} GRPO steps inside the world model
`{(env.get('world_model') or {}).get('path', '?')}` on `{task}`, exported from
`{ckpt_path}` by `scripts/export.py`. Same layout, tensor names, shapes and dtypes as the base
checkpoint: load it where the base loads.

## Recipe

- GRPO: lr {algo.get('lr')}, KL coefficient {algo.get('kl_coef')}, global batch
  {algo.get('global_batch')}, clip [{algo.get('clip_low')}, {algo.get('clip_high')}]
- rollout: {rollout.get('num_envs')} envs in groups of {rollout.get('group_size')}, temperature
  {rollout.get('temperature')}, {rollout.get('max_episode_steps')} steps per episode
- reward: `{(cfg.get('reward') or {}).get('_target_', '?')}`, success threshold
  {env.get('success_threshold')}; seed {cfg.get('seed')}

## Evaluation in the simulator

{evals}

## The run's config

```yaml
{yaml.safe_dump(cfg, sort_keys=False).strip()}
```
"""
    return ModelCard(content)


def export_world_model(ckpt_path: str, out: str, source: str | None = None,
                       force: bool = False) -> dict:
    """Write the PACE-refined world model of the checkpoint into ``out`` (a loadable
    world-model directory); ``source``: the world model the run started from (default: the
    run's ``env.world_model.path``); ``force``: replace an ``out`` that holds other files."""
    check_output_dir(out, "world_model", force)
    ckpt = read_checkpoint(ckpt_path)
    pace = ckpt.get("pace")
    if not pace or not pace.get("world_model"):
        raise ConfigError(f"{ckpt_path} holds no refined world model (no PACE round ran in "
                          "this run: pace.version 0): the run's world model is its source")
    cfg = ckpt.get(CONFIG_KEY) or {}
    source = source or ((cfg.get("env") or {}).get("world_model") or {}).get("path")
    if not source or not os.path.isdir(source):
        raise ConfigError(f"the source world model {source} (the run's env.world_model.path) "
                          "is not on this machine: pass --source DIR, a copy of it")
    model = ActionWanModel.from_pretrained(source)
    missing, unexpected = model.load_state_dict(pace["world_model"], strict=False)
    unexpected = list(unexpected)
    if unexpected or any(k.startswith(("transformer.", "action.")) for k in missing):
        raise ConfigError(f"{ckpt_path}: its refined world model does not fit {source} "
                          f"(unexpected {unexpected[:5]}): pass the --source it started from")
    model.save_pretrained(out)
    return {"out": out, "source": source, "version": int(pace.get("version", 0))}
