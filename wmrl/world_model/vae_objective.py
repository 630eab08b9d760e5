"""The VAE's training objective (the world-model trainer's ``part=vae``, the asset build's
first stage): on a clip x in [-1, 1] [B, 3, T, H, W] and its reconstruction x' = D(z),
z = mu + sigma * eps from the posterior q(z|x) = N(mu, sigma^2),

    L = mean_w(|x - x'| + (x - x')^2) + kl_weight * mean(KL(q(z|x) || N(0, I))),
    KL = 0.5 (mu^2 + sigma^2 - 1 - log sigma^2)  (per latent element),

mean_w a plain mean, or with ``foreground_weight`` = lambda the weighted mean
sum(w * e) / (N * mean(w)), w = 1 + lambda * 1[max_c |x - bg| > 0.1] (bg: the per-pixel median
of initial frames, i.e. the static table), so the few pixels of the hand and the blocks are not
drowned by the background. ``clip_frames`` = 1 + 4k < 13 trains on the anchor + k random
consecutive 4-frame groups of each clip (cheaper; the causal encoder sees the same
anchor-then-jump structure as in the env)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wmrl.io.pixels import u8_to_unit_torch


@dataclass(frozen=True)
class VaeObjective:
    kl_weight: float = 1e-6
    foreground_weight: float = 0.0
    clip_frames: int = 5

    def __post_init__(self):
        if self.clip_frames < 1 or (self.clip_frames - 1) % 4:
            raise ValueError(f"objective.clip_frames must be 1 + 4k, got {self.clip_frames}")
        if self.kl_weight < 0 or self.foreground_weight < 0:
            raise ValueError("objective.kl_weight and objective.foreground_weight must be >= 0")

    def background(self, first_frames: torch.Tensor, generator: torch.Generator
                   ) -> torch.Tensor | None:
        """bg [3, 1, H, W]: the per-pixel median of (at most 256, drawn from ``generator``)
        initial frames (uint8 [N, H, W, 3]); None without ``foreground_weight``."""
        if self.foreground_weight <= 0:
            return None
        sub = first_frames[torch.randperm(len(first_frames), generator=generator)[:256]]
        return u8_to_unit_torch(sub).median(0).values.permute(2, 0, 1)[:, None]

    def loss(self, vae, x: torch.Tensor, generator: torch.Generator,
             background: torch.Tensor | None = None) -> torch.Tensor:
        """L (module docstring) of ``vae`` (``AutoencoderKLWan``) on clips x [B, 3, T, H, W];
        the frame groups and eps are drawn from ``generator`` in that order."""
        groups = (self.clip_frames - 1) // 4
        if groups < (x.shape[2] - 1) // 4:
            g = int(torch.randint((x.shape[2] - 1) // 4 - groups + 1, (1,), generator=generator))
            x = torch.cat([x[:, :, :1], x[:, :, 1 + 4 * g : 1 + 4 * (g + groups)]], 2)
        post = vae.encode(x).latent_dist
        z = post.mean + post.std * torch.randn(post.mean.shape, generator=generator)
        rec = vae.decode(z).sample
        kl = 0.5 * (post.mean.pow(2) + post.var - 1.0 - post.logvar).mean()
        d = rec - x
        if background is None:
            return d.abs().mean() + d.pow(2).mean() + self.kl_weight * kl
        fg = ((x - background).abs().amax(1, keepdim=True) > 0.1).float()
        w = 1.0 + self.foreground_weight * fg
        return (w * (d.abs() + d.pow(2))).mean() / w.mean() + self.kl_weight * kl
