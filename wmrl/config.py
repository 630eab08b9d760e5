"""Building objects from config, and the checks that run before anything heavy starts."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

ASSETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


class ConfigError(ValueError):
    """Bad configuration: the message names the key and what to change."""


def assets_dir(sub: str = "") -> str:
    """``${wmrl_assets:}`` / ``${wmrl_assets:policy}`` in configs: the shipped tiny checkpoints."""
    return os.path.join(ASSETS_DIR, sub) if sub else ASSETS_DIR


if not OmegaConf.has_resolver("wmrl_assets"):
    OmegaConf.register_new_resolver("wmrl_assets", assets_dir)


def to_container(cfg: Any) -> Any:
    """DictConfig -> plain (picklable) dicts/lists with interpolations resolved."""
    if isinstance(cfg, DictConfig) or OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def build(spec: Any, **kwargs: Any) -> Any:
    """Instantiate a ``_target_`` spec (dict or DictConfig); pass objects through unchanged.

    Workers receive plain dicts and call this on their own process, so models are built
    (and weights loaded) where they run."""
    if isinstance(spec, dict) or OmegaConf.is_config(spec):
        from hydra.utils import instantiate

        spec = to_container(spec)
        if "_target_" not in spec:
            raise ConfigError(f"config {sorted(spec)} has no _target_ to build")
        return instantiate(spec, _convert_="all", **kwargs)
    if kwargs:
        raise ConfigError(f"cannot pass {sorted(kwargs)} to an already built {type(spec)}")
    return spec


def validate(cfg: DictConfig) -> None:
    """Fail early (before Ray or any model starts) with the key that is wrong."""
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
    strategy = cfg.get("strategy") or {}
    if strategy.get("gradient_clip_norm") is not None and a.get("grad_clip") is not None:
        raise ConfigError(
            f"strategy.gradient_clip_norm={strategy.gradient_clip_norm} and algorithm.grad_clip="
            f"{a.grad_clip} would clip every gradient twice (GRPOModule's optimizer steps go "
            "through the strategy): set strategy.gradient_clip_norm=null (the module clips by "
            "the global norm) or algorithm.grad_clip=null"
        )
    if cfg.get("ckpt_path") and not os.path.exists(cfg.ckpt_path):
        raise ConfigError(f"ckpt_path={cfg.ckpt_path} does not exist: pass a saved .ckpt file")
