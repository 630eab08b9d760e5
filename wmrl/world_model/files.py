"""The layout of a world-model directory (``ActionWanModel.save_pretrained``):
``transformer/`` and ``vae/`` in diffusers format, ``action/ACTION_WEIGHTS`` for the action
modules, ``config.json``."""

ACTION_WEIGHTS = "action_modules.safetensors"
CONFIG_FILES = ("transformer/config.json", "vae/config.json", "action/config.json")
