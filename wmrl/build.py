"""Building objects from config: ``build`` instantiates a ``_target_`` spec where it runs
(a Ray actor builds its own models), ``to_container`` makes a config plain and picklable,
and ``${wmrl_assets:}`` (registered on import) names the shipped tiny checkpoints."""

from __future__ import annotations

import os
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from wmrl.errors import ConfigError

ASSETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


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
        spec = to_container(spec)
        if "_target_" not in spec:
            raise ConfigError(f"config {sorted(spec)} has no _target_ to build")
        try:
            return instantiate(spec, _convert_="all", **kwargs)
        except InstantiationException as err:
            if isinstance(err.__cause__, ConfigError):  # our one-line error, not Hydra's wrap
                raise err.__cause__ from None
            raise
    if kwargs:
        raise ConfigError(f"cannot pass {sorted(kwargs)} to an already built {type(spec)}")
    return spec


