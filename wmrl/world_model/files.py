"""The layout of a world-model directory (``ActionWanModel.save_pretrained``):
``transformer/`` and ``vae/`` in diffusers format, ``action/ACTION_WEIGHTS`` for the action
modules, ``config.json``."""

from __future__ import annotations

from pathlib import Path

ACTION_WEIGHTS = "action_modules.safetensors"
CONFIG_FILES = ("transformer/config.json", "vae/config.json", "action/config.json")


def is_world_model_dir(path) -> bool:
    """Whether ``path`` holds a saved / imported world model: its three config files
    (``CONFIG_FILES``; the architecture, all the plan reads). Its weights are checked where
    they load (``ActionWanModel.from_pretrained``, ``wmrl.asset_checks``)."""
    return bool(path) and all((Path(str(path)) / f).is_file() for f in CONFIG_FILES)
