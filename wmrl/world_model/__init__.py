"""Action-conditioned Wan video world model (diffusers Wan DiT + VAE + action modules)."""

from wmrl.world_model.action_wan import (
    ActionConditioner,
    ActionWanModel,
    AnchorCache,
    build_world_model,
)

__all__ = ["ActionConditioner", "ActionWanModel", "AnchorCache", "build_world_model"]
