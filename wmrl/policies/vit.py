"""Plain-torch Vision Transformers with timm's parameter names, as Prismatic checkpoints store them.

Prismatic (OpenVLA / OpenVLA-OFT) builds its two vision featurizers with timm 0.9.x
(``vit_large_patch14_reg4_dinov2.lvd142m`` and ``vit_so400m_patch14_siglip_224``) and renames
every LayerScale ``gamma`` to ``scale_factor`` (HF would otherwise rewrite ``gamma`` keys), so the
checkpoint keys are ``patch_embed.proj.*``, ``cls_token``, ``reg_token``, ``pos_embed``,
``blocks.N.{norm1,attn.qkv,attn.proj,ls1.scale_factor,norm2,mlp.fc1,mlp.fc2,ls2.scale_factor}``,
``norm.*`` and, for SigLIP's MAP head, ``attn_pool.{latent,q,kv,proj,norm,mlp.fc1,mlp.fc2}``.
The final ``norm`` and ``attn_pool`` are unused by Prismatic (it reads the output of the
second-to-last block, without the final norm, prefix tokens dropped) but exist in the checkpoint,
so they exist here too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class ViTConfig:
    """timm ``VisionTransformer`` arguments that change parameter shapes or the forward."""

    img_size: int = 224
    patch_size: int = 14
    embed_dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    class_token: bool = True
    reg_tokens: int = 0
    no_embed_class: bool = False  # True: pos_embed covers patches only, prefix tokens added after
    init_values: float | None = None  # LayerScale init; None = no LayerScale
    global_pool: str = "token"  # "map" adds SigLIP's attention-pool head (unused by Prismatic)
    norm_eps: float = 1e-6

    def to_dict(self) -> dict:
        return asdict(self)


# timm 0.9.x model ids used by Prismatic -> architecture (image size is set by the VLA config).
TIMM_VIT_ARCHS: dict[str, dict] = {
    "vit_large_patch14_reg4_dinov2.lvd142m": dict(
        patch_size=14, embed_dim=1024, depth=24, num_heads=16, init_values=1e-5,
        reg_tokens=4, no_embed_class=True, class_token=True, global_pool="token",
    ),
    "vit_so400m_patch14_siglip_224": dict(
        patch_size=14, embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362,
        class_token=False, global_pool="map",
    ),
}


def vit_config_for(timm_id: str, img_size: int) -> ViTConfig:
    if timm_id not in TIMM_VIT_ARCHS:
        raise ValueError(
            f"timm_model_ids entry {timm_id!r} is not supported; known: {sorted(TIMM_VIT_ARCHS)}"
        )
    return ViTConfig(img_size=img_size, **TIMM_VIT_ARCHS[timm_id])


class PatchEmbed(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.proj = nn.Conv2d(3, cfg.embed_dim, cfg.patch_size, cfg.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # [B, N, D]


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()  # timm default (exact erf GELU) for both DINOv2 and SigLIP
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class LayerScale(nn.Module):
    """x * gamma, with gamma stored as ``scale_factor`` (Prismatic's rename)."""

    def __init__(self, dim: int, init_values: float):
        super().__init__()
        self.scale_factor = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale_factor


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(d_h)) v
        return self.proj(x.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm block: x += ls1(attn(norm1(x))); x += ls2(mlp(norm2(x)))."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        d = cfg.embed_dim
        self.norm1 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.attn = Attention(d, cfg.num_heads)
        self.ls1 = LayerScale(d, cfg.init_values) if cfg.init_values else nn.Identity()
        self.norm2 = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.mlp = Mlp(d, int(d * cfg.mlp_ratio))
        self.ls2 = LayerScale(d, cfg.init_values) if cfg.init_values else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class AttentionPoolLatent(nn.Module):
    """SigLIP's MAP head (parameters only matter for checkpoint compatibility)."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        d = cfg.embed_dim
        self.num_heads = cfg.num_heads
        self.latent = nn.Parameter(torch.zeros(1, 1, d))
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps)
        self.mlp = Mlp(d, int(d * cfg.mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.num_heads
        q = self.q(self.latent.expand(b, -1, -1)).reshape(b, 1, h, d // h).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, h, d // h).permute(2, 0, 3, 1, 4).unbind(0)
        x = self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, 1, d))
        return (x + self.mlp(self.norm(x)))[:, 0]


class VisionTransformer(nn.Module):
    """timm-compatible ViT whose ``forward`` returns Prismatic's features: the patch tokens
    of the second-to-last block, [B, (img/patch)^2, D]."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        if cfg.depth < 2:
            raise ValueError(f"ViT depth must be >= 2 (Prismatic reads block depth-2), got {cfg.depth}")
        if cfg.img_size % cfg.patch_size:
            raise ValueError(f"img_size {cfg.img_size} is not a multiple of patch_size {cfg.patch_size}")
        self.cfg = cfg
        self.embed_dim = cfg.embed_dim
        self.num_patches = (cfg.img_size // cfg.patch_size) ** 2
        self.num_prefix_tokens = int(cfg.class_token) + cfg.reg_tokens
        self.gradient_checkpointing = False
        d = cfg.embed_dim
        self.patch_embed = PatchEmbed(cfg)
        if cfg.class_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        if cfg.reg_tokens:
            self.reg_token = nn.Parameter(torch.zeros(1, cfg.reg_tokens, d))
        n_pos = self.num_patches + (0 if cfg.no_embed_class else self.num_prefix_tokens)
        self.pos_embed = nn.Parameter(torch.randn(1, n_pos, d) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps)
        if cfg.global_pool == "map":
            self.attn_pool = AttentionPoolLatent(cfg)

    def _prefix(self, b: int) -> list[torch.Tensor]:
        out = []
        if self.cfg.class_token:
            out.append(self.cls_token.expand(b, -1, -1))
        if self.cfg.reg_tokens:
            out.append(self.reg_token.expand(b, -1, -1))
        return out

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixels)
        prefix = self._prefix(x.shape[0])
        if self.cfg.no_embed_class:  # timm _pos_embed: add pos to patches, then prepend prefix
            x = torch.cat([*prefix, x + self.pos_embed], dim=1)
        else:
            x = torch.cat([*prefix, x], dim=1) + self.pos_embed
        # Blocks after depth-2 do not affect Prismatic's output, so they are not run.
        for blk in self.blocks[: self.cfg.depth - 1]:
            if self.gradient_checkpointing and torch.is_grad_enabled():
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return x[:, self.num_prefix_tokens :]
