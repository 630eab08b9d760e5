"""Tiny real models shared by tests in several folders (apart from toys.py, which the Ray
actors import: this one loads diffusers)."""

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
