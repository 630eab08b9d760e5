"""OpenVLA-OFT policy configs: the ``config.json`` fields of the architectures wmrl builds
(``tiny_config`` for CPU tests and benches, ``openvla_7b_config`` for the published 7B) and
the wmrl-only settings under its ``"wmrl"`` key (``WMRL_DEFAULTS``: absent in upstream files
-> the LIBERO OFT / WoVR recipe)."""

from __future__ import annotations

import copy

from wmrl.policies.vit import ViTConfig

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)

# wmrl settings (config["wmrl"]); defaults = the LIBERO OFT / WoVR recipe.
WMRL_DEFAULTS = dict(
    chunk=8,
    action_dim=7,
    num_images_in_input=1,  # 2 = third-person + wrist image (obs["wrist_image"])
    proprio_dim=0,  # > 0 adds OFT's proprio token from obs["state"] (keys proprio_projector.*)
    empty_token_id=29871,  # Llama '▁' that follows "Out:" in training data
    stop_token_id=2,
    append_stop_token=False,  # RLinf drops it; openvla-oft's predict_action keeps it
    gripper="libero",  # binarise + invert: -sign(2g - 1)
    top_k=0,
    center_crop=False,  # crop 90% area then resize back (openvla-oft's eval option; RLinf's
    #                     LIBERO rollout does not crop)
    image_means=[list(IMAGENET_MEAN), list(SIGLIP_MEAN)],
    image_stds=[list(IMAGENET_STD), list(SIGLIP_STD)],
    vision_configs=None,  # explicit ViTConfig dicts (tiny models); None = from timm_model_ids
)


def _prismatic_config(image_size: int, vocab_base: int, **llama) -> dict:
    """The fields of an OpenVLA ``config.json`` that set shapes: fused DINOv2 + SigLIP at
    ``image_size``, Llama with the vocabulary padded by 64 above ``vocab_base``."""
    return dict(
        model_type="openvla",
        vision_backbone_id="dinosiglip-vit-so-224px",
        llm_backbone_id="llama2-7b-pure",
        use_fused_vision_backbone=True,
        timm_model_ids=["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"],
        image_sizes=[image_size, image_size],
        image_resize_strategy="resize-naive",
        pad_token_id=vocab_base,
        pad_to_multiple_of=64,
        n_action_bins=256,
        text_config=dict(model_type="llama", vocab_size=vocab_base + 64, rms_norm_eps=1e-6,
                         pad_token_id=vocab_base, **llama),
        norm_stats={},
    )


def tiny_config(image_size: int = 32, vocab_base: int = 512) -> dict:
    """A tiny fused DINOv2+SigLIP / Llama config with real structure (CPU tests, benches)."""
    dino = ViTConfig(img_size=image_size, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     init_values=1e-5, reg_tokens=4, no_embed_class=True)
    siglip = ViTConfig(img_size=image_size, patch_size=8, embed_dim=48, depth=2, num_heads=2,
                       mlp_ratio=3.7362, class_token=False, global_pool="map")
    cfg = _prismatic_config(image_size, vocab_base, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                            max_position_embeddings=512)
    cfg["norm_stats"] = {"libero_spatial_no_noops": {"action": {
        "q01": [-0.75, -0.75, -0.9, -0.1, -0.15, -0.2, 0.0],
        "q99": [0.9, 0.85, 0.95, 0.15, 0.2, 0.3, 1.0],
        "mask": [True] * 6 + [False],
    }}}
    cfg["wmrl"] = dict(WMRL_DEFAULTS, empty_token_id=3,
                       vision_configs=[dino.to_dict(), siglip.to_dict()])
    return cfg


def openvla_7b_config() -> dict:
    """The architecture of the published OpenVLA-7B / OpenVLA-OFT checkpoints (fused DINOv2
    ViT-L/14-reg4 + SigLIP so400m/14 at 224 px, fused-GELU MLP projector, Llama-2-7B with the
    vocabulary padded from 32000 to 32064). No ``norm_stats``: it describes shapes only
    (``build_policy_meta`` builds it on the meta device when no checkpoint directory is at
    hand, e.g. ``scripts/plan.py``)."""
    return _prismatic_config(224, 32000, hidden_size=4096, intermediate_size=11008,
                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                             max_position_embeddings=2048)


def resolve_config(config: dict) -> tuple[dict, dict]:
    """A copy of a policy config with every wmrl setting (``WMRL_DEFAULTS`` under the
    config's ``"wmrl"`` entries), and those settings; refuses a config without the
    OpenVLAConfig fields that set shapes."""
    config = copy.deepcopy(dict(config))
    for key in ("text_config", "n_action_bins", "pad_to_multiple_of"):
        if key not in config:
            raise KeyError(f"policy config is missing {key!r} (OpenVLAConfig field)")
    wm = dict(WMRL_DEFAULTS)
    wm.update(config.get("wmrl") or {})
    config["wmrl"] = wm
    return config, wm
