"""Composing a config (``compose_config``) and the checks that run on it before anything heavy
starts (building objects from config, and the ``${wmrl_assets:}`` resolver: ``wmrl/build.py``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from wmrl.asset_checks import check_accelerator, check_assets
from wmrl.build import to_container
from wmrl.errors import ConfigError
from wmrl.schema import check as check_schema
from wmrl.weights.dtypes import DTYPES

__all__ = ["CONF_DIR", "ConfigError", "check_paths", "compose_config", "validate"]

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """``conf/<config_name>.yaml`` with Hydra ``overrides``, composed in-process (what
    ``@hydra.main`` gives a script, without the run dir or logging); a bad override raises
    Hydra's own error, naming the key."""
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return compose(config_name, overrides=list(overrides))


def validate(cfg: DictConfig) -> None:
    """Fail early (before Ray or any model starts) with the key that is wrong: the groups'
    schemas (``wmrl.schema``: types, choices, ranges), then the checks across keys."""
    check_schema(cfg)
    for group in ("policy", "env"):
        spec = cfg.get(group)
        if not (OmegaConf.is_dict(spec) and "_target_" in spec):
            raise ConfigError(f"{group}={spec!r} must be a config with a _target_ (choose "
                              f"{group}=<a file of conf/{group}/> or '+{group}={{_target_: ...}}')")
    max_steps = cfg.get("trainer", {}).get("max_steps", -1)
    if not (isinstance(max_steps, int) and (max_steps >= 1 or max_steps == -1)):
        raise ConfigError(f"trainer.max_steps={max_steps!r} is not allowed: an integer >= 1 "
                          "(training steps = rollout batches)")
    r = cfg.rollout
    if r.num_envs % r.group_size != 0:
        raise ConfigError(
            f"rollout.num_envs={r.num_envs} is not divisible by rollout.group_size="
            f"{r.group_size}: every group of rollouts must share one initial state"
        )
    per_worker, rem = divmod(r.num_envs, r.num_env_workers)
    if rem or per_worker % r.group_size:
        raise ConfigError(
            f"rollout.num_envs={r.num_envs} must split over rollout.num_env_workers="
            f"{r.num_env_workers} in whole groups of rollout.group_size={r.group_size}"
        )
    stages = r.get("pipeline_stages", 1)
    if per_worker % (stages * r.group_size):
        raise ConfigError(
            f"rollout.pipeline_stages={stages} must split each env worker's {per_worker} envs "
            f"into whole groups of rollout.group_size={r.group_size}"
        )
    if r.get("placement", "disaggregated") == "hybrid" and stages < 2:
        raise ConfigError("rollout.placement=hybrid pipelines env and policy: set "
                          "rollout.pipeline_stages >= 2")
    if r.max_episode_steps % r.chunk != 0:
        raise ConfigError(
            f"rollout.max_episode_steps={r.max_episode_steps} must be a multiple of "
            f"rollout.chunk={r.chunk}"
        )
    a = cfg.algorithm
    if a.global_batch % a.micro_batch != 0:
        raise ConfigError(
            f"algorithm.global_batch={a.global_batch} is not divisible by "
            f"algorithm.micro_batch={a.micro_batch}"
        )
    if a.get("drop_unrepeatable") and not (cfg.get("env") or {}).get("resample_check"):
        raise ConfigError(
            "algorithm.drop_unrepeatable=true leaves out the episodes whose two imagined "
            "verdicts disagree, which the env's resample check gives: set "
            "env.resample_check=true (a world-model env: WanWorldModelEnv)")
    strategy = cfg.get("strategy") or {}
    if strategy.get("gradient_clip_norm") is not None and a.get("grad_clip") is not None:
        raise ConfigError(
            f"strategy.gradient_clip_norm={strategy.gradient_clip_norm} and algorithm.grad_clip="
            f"{a.grad_clip} would clip every gradient twice (GRPOModule's optimizer steps go "
            "through the strategy): set strategy.gradient_clip_norm=null (the module clips by "
            "the global norm) or algorithm.grad_clip=null"
        )


# (config key, what it must be) of the local paths models load from; null = not used
MODEL_PATHS = (
    ("policy.pretrained_path", "a save_pretrained policy directory (config.json + safetensors)"),
    ("env.world_model.path", "a world-model directory (transformer/, vae/, action/)"),
    ("env.initial_states", "an initial-states directory (initial_states.safetensors)"),
    ("reward.checkpoint", "a reward checkpoint (directory or resnet_rm.pth)"),
)


def check_paths(cfg: DictConfig) -> None:
    """Every model path and ``ckpt_path`` exists and has the right format, before anything
    loads: weight files whole and of the shapes their configs describe (``wmrl.asset_checks``,
    headers only), the trainer's accelerator present. A checkpoint must be a Lightning
    checkpoint, of the same policy config."""
    for key, what in MODEL_PATHS:
        value = OmegaConf.select(cfg, key, default=None)
        if isinstance(value, str) and not os.path.exists(value):
            raise ConfigError(f"{key}={value} does not exist: point it at {what} on this "
                              "machine (docs/checkpoints.md)")
    check_assets(cfg)
    if cfg.get("ckpt_path"):
        check_checkpoint(cfg.ckpt_path, to_container(cfg.policy), "ckpt_path")
    check_accelerator(cfg)  # last: it loads Lightning (seconds), the checks above need none


def check_policy_chunk(policy: Any, chunk: int) -> None:
    """The built policy decodes ``rollout.chunk`` actions per call (a policy without a
    ``chunk`` attribute says nothing and passes)."""
    own = getattr(policy, "chunk", None)
    if own is not None and int(own) != int(chunk):
        raise ConfigError(f"rollout.chunk={chunk} but the policy decodes chunks of {own} actions "
                          f"({type(policy).__name__}.chunk): set rollout.chunk={own}")


def check_held_out_seed(task, eval_seed: int, purpose: str) -> None:
    """A scene set for a choice (``purpose``) must be none the run trains on or reports:
    not ``task.eval_seed``, ``task.unseen_eval_seed`` nor ``task.train_pool.seed``."""
    used = {task.eval_seed: "the sim eval's (task.eval_seed)",
            task.unseen_eval_seed: "the unseen (task.unseen_eval_seed)"}
    if task.get("train_pool"):
        used[task.train_pool.seed] = "the training pool's (task.train_pool.seed)"
    if eval_seed in used:
        raise ConfigError(f"--eval-seed {eval_seed} is {used[eval_seed]} scene set, which "
                          f"results are reported on or trained on: {purpose} on another one")


def resolve_ckpt_path(cfg: DictConfig) -> DictConfig:
    """``ckpt_path=last`` (Lightning's word for it) -> ``<run_dir>/checkpoints/last.ckpt``,
    in place: with ``hydra.run.dir=<the run's dir>`` the same run goes on, same logger run."""
    if cfg.get("ckpt_path") == "last":
        path = os.path.join(str(cfg.run_dir), "checkpoints", "last.ckpt")
        if not os.path.exists(path):
            raise ConfigError(f"ckpt_path=last: {path} does not exist: pass hydra.run.dir=<the "
                              "run's dir> (the one holding checkpoints/last.ckpt), or "
                              "ckpt_path=<a .ckpt>")
        with open_dict(cfg):
            cfg.ckpt_path = path
    return cfg


CONFIG_KEY = "wmrl_config"  # checkpoint[CONFIG_KEY]: the resolved run config as plain data


DCP_META = "meta.pt"  # a DCP checkpoint folder's non-tensor entries (Lightning's name for it)


def is_dcp_folder(path: str) -> bool:
    """A sharded checkpoint folder as ``HybridShardStrategy`` writes it (``.metadata``)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, ".metadata"))


def read_checkpoint_meta(path: str, key: str = "ckpt_path") -> dict:
    """The checkpoint's bookkeeping (no tensor is read: memory-mapped; for a DCP folder its
    ``meta.pt``): ``global_step`` and, when it was written by wmrl, the resolved run config
    ``CONFIG_KEY``."""
    if os.path.isdir(path):
        if not is_dcp_folder(path) or not os.path.isfile(os.path.join(path, DCP_META)):
            raise ConfigError(f"{key}={path} is a directory but not a sharded checkpoint (no "
                              f".metadata and {DCP_META}): pass a .ckpt file or a checkpoint "
                              "folder that scripts/fit.py wrote")
        ckpt = torch.load(os.path.join(path, DCP_META), map_location="cpu", weights_only=True)
        return {"global_step": ckpt.get("global_step"), CONFIG_KEY: ckpt.get(CONFIG_KEY)}
    if not os.path.isfile(path):
        raise ConfigError(f"{key}={path} does not exist or is not a file: pass a saved .ckpt "
                          "(<run_dir>/checkpoints/last.ckpt)")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ConfigError(f"{key}={path} is not a Lightning checkpoint ({type(err).__name__}: "
                          f"{str(err).splitlines()[0][:120]}): pass a .ckpt that scripts/fit.py "
                          "wrote") from None
    if not isinstance(ckpt, dict) or not {"state_dict", "global_step"} <= set(ckpt):
        raise ConfigError(f"{key}={path} is not a Lightning checkpoint (no state_dict / "
                          "global_step): pass a .ckpt that scripts/fit.py wrote")
    return {"global_step": ckpt["global_step"], CONFIG_KEY: ckpt.get(CONFIG_KEY)}


# policy keys that may differ between the run that trained a checkpoint and the one that loads
# it: where the initial weights lay on that machine, kernels and memory switches
HOW_TO_RUN_KEYS = ("pretrained_path", "fused_ops", "gradient_checkpointing")


def policy_config_diff(saved: dict, given: dict, prefix: str = "policy") -> list[str]:
    """``key: saved -> given`` for every leaf where two policy configs differ."""
    out = []
    for k in sorted(set(saved) | set(given)):
        a, b = saved.get(k, "<unset>"), given.get(k, "<unset>")
        if k.endswith("dtype") and DTYPES.get(str(a), a) == DTYPES.get(str(b), b):
            continue  # bf16 and bfloat16 are one dtype
        if k in HOW_TO_RUN_KEYS and prefix == "policy":
            continue  # how to load or run the policy, not which policy it is
        if isinstance(a, dict) and isinstance(b, dict):
            out += policy_config_diff(a, b, f"{prefix}.{k}")
        elif a != b:
            out.append(f"{prefix}.{k}: {a!r} in the checkpoint, {b!r} given")
    return out


def check_checkpoint(path: str, policy: dict, key: str = "ckpt_path") -> dict:
    """A Lightning checkpoint whose policy config (when recorded) is ``policy``."""
    meta = read_checkpoint_meta(path, key)
    saved = (meta[CONFIG_KEY] or {}).get("policy")
    if saved is not None:
        diff = policy_config_diff(saved, policy)
        if diff:
            raise ConfigError(f"{key}={path} was trained with another policy config ("
                              + "; ".join(diff[:4]) + (" ..." if len(diff) > 4 else "")
                              + "): pass the policy=... overrides of the run that wrote it")
    return meta
