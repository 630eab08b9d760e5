"""Tiny real models shared by tests in several folders (apart from toys.py, which the Ray
actors import: this one loads diffusers)."""

import numpy as np

from wmrl.world_model.action_wan import ActionWanModel


def tiny_world_model() -> ActionWanModel:
    """conf/train_world_model.yaml's VAE layout (16 ch, 8x), a 1-layer 16-wide DiT."""
    return ActionWanModel.from_config(tiny_world_model_config())


def tiny_world_model_config() -> dict:
    """``tiny_world_model``'s config (a ``world_model`` dict without ``path``)."""
    return {
        "shift": 5.0, "init_seed": 0,
        "transformer": {"patch_size": [1, 1, 1], "num_attention_heads": 2,
                        "attention_head_dim": 8, "in_channels": 16, "out_channels": 16,
                        "text_dim": 32, "freq_dim": 64, "ffn_dim": 16, "num_layers": 1,
                        "rope_max_seq_len": 32},
        "vae": {"base_dim": 8, "z_dim": 16, "dim_mult": [1, 2, 2], "num_res_blocks": 1,
                "temperal_downsample": [True, True], "in_channels": 12, "out_channels": 12,
                "is_residual": True, "patch_size": 2, "scale_factor_spatial": 8,
                "latents_mean": [0.0] * 16, "latents_std": [1.0] * 16},
        "action": {"action_dim": 7, "actions_per_latent": 4, "num_text_tokens": 1}}


def pushed_square(i: int, T: int, size: int = 32, successes: int = 0):
    """A LeRobot-writer episode (frames, actions, task, success, state) of T rows: a red
    square (size / 5 wide) on grey, pushed by the first two action values (size / 16 px per
    unit): the frames follow the actions. The last ``successes`` rows record success."""
    rng = np.random.default_rng(i)
    actions = rng.uniform(-1, 1, size=(T, 7)).astype(np.float32)
    frames = np.full((T, size, size, 3), 30, np.uint8)
    side, pos = size // 5, np.full(2, (size - size // 5) / 2)
    for t in range(T):
        y, x = np.clip(pos, 0, size - side).astype(int)
        frames[t, y:y + side, x:x + side] = (220, 60, 60)
        pos += size / 16 * actions[t, :2]
    success = np.arange(T) >= T - successes if successes else None
    return frames, actions, "push the square", success, None
