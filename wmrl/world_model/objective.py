"""The world model's training objective: flow matching on the generated latent frames, with
the condition frames held at timestep 0.

A clip's latents x0 [B, C, F, h, w] (F = 4 for 13 frames): latent 0 is the anchor frame,
latents 1 .. n_c - 1 the context (the last 4 executed frames), latents n_c .. F - 1 the
frames to generate. With the shifted 1000-step training grid (DiffSynth's FlowMatchScheduler,
shift s = 5, ``set_timesteps(1000, training=True)``)

    u_i = 1 - i / 1000,  sigma_i = s u_i / (1 + (s - 1) u_i),  t_i = 1000 sigma_i,  i = 0..999
    y_i = exp(-2 ((t_i - 500) / 1000)^2),  w_i = (y_i - min y) * 1000 / sum_j (y_j - min y)

one step draws i ~ U{0..999}, eps ~ N(0, I) and builds

    x[:, :, 0]      = x0[:, :, 0]                                  (anchor: clean)
    x[:, :, 1:n_c]  = (1 - sigma_c) x0 + sigma_c eps,  sigma_c = sigma_950   (context: a little noise)
    x[:, :, n_c:]   = (1 - sigma_i) x0 + sigma_i eps                (generated frames)

tells the model timestep 0 on every condition latent and t_i on the rest, and takes

    L = w_i * mean_{generated latents} (v_theta(x, t, a) - (eps - x0))^2 .

That is WoVR's objective exactly as the DiffSynth fork that trained it computes it
(``WanVideoPipeline.training_loss``; tests/fixtures/rlinf/make_wovr_training_loss_fixture.py
records the fork's own losses and gradients, which ``FlowMatchObjective.wovr()`` reproduces),
including two details of its code: one i per batch (its batches hold one clip), and the drawn
t_i rounded to the pipeline dtype (bf16) before sigma and w are looked up at the grid point
nearest it — the model is told the rounded value.

``FlowMatchObjective()`` (the defaults) is the objective the tabletop world model was trained
with: one i per clip, the context clean (optionally ``context_noise_sigma`` * N(0, I) added),
no weights (optionally ``foreground_weight``, see ``foreground_weights``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from wmrl.weights.dtypes import to_dtype
from wmrl.world_model.sampler import NUM_TRAIN_TIMESTEPS, shift_sigmas


@functools.lru_cache(maxsize=8)
def training_grid(shift: float, n: int = NUM_TRAIN_TIMESTEPS
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sigma_i, t_i, w_i) of the shifted n-step training grid (float32, see the module;
    computed once per shift: every training step looks it up). Read-only."""
    sigmas = shift_sigmas(torch.linspace(1.0, 0.0, n + 1, dtype=torch.float32)[:-1], shift)
    t = sigmas * n
    y = torch.exp(-2 * ((t - n / 2) / n) ** 2)
    y = y - y.min()
    return sigmas, t, y * (n / y.sum())


def foreground_weights(new: torch.Tensor, last_cond: torch.Tensor,
                       strength: float) -> torch.Tensor:
    """Per-cell loss weights [B, 1, T, h, w] = 1 + a * d / mean(d), d = channel-mean |new -
    last condition latent|: the cells where the scene changes (the hand, a carried or dropped
    block) count 1 + a times their share; a static background counts ~1. Each clip's weights
    average 1 + a, so clips with little motion are not drowned out."""
    d = (new - last_cond).abs().mean(1, keepdim=True)
    return 1.0 + strength * d / d.mean(dim=(1, 2, 3, 4), keepdim=True).clamp(min=1e-6)


@dataclass(frozen=True)
class FlowMatchObjective:
    """One configured objective (see the module docstring for the equations).

    per_sample_timesteps: one grid index per clip (True) or one per batch (False, the fork's).
    context_timestep_index: grid index of the noise on context latents 1..n_c-1; None: clean.
    timestep_weights: scale the loss by w_i (the fork's ``training_weight``).
    timestep_dtype: round t_i to this dtype before the lookup (the fork: its pipeline dtype);
      None: the model's dtype when ``timestep_weights`` (the fork's behaviour), else no rounding.
    context_noise_sigma / foreground_weight: the tabletop's augmentations (0 = off).
    """

    per_sample_timesteps: bool = True
    context_timestep_index: int | None = None
    timestep_weights: bool = False
    timestep_dtype: str | None = None
    context_noise_sigma: float = 0.0
    foreground_weight: float = 0.0

    @classmethod
    def wovr(cls, **overrides) -> FlowMatchObjective:
        """The DiffSynth fork's ``training_loss`` (WoVR's world models)."""
        return cls(**{**dict(per_sample_timesteps=False,
                             context_timestep_index=NUM_TRAIN_TIMESTEPS - 50,
                             timestep_weights=True), **overrides})

    def __post_init__(self):
        if self.timestep_dtype is not None:
            to_dtype(self.timestep_dtype, "objective.timestep_dtype")  # refuses an unknown name
        i = self.context_timestep_index
        if i is not None and not 0 <= i < NUM_TRAIN_TIMESTEPS:
            raise ValueError(f"objective.context_timestep_index must be in [0, "
                             f"{NUM_TRAIN_TIMESTEPS - 1}] or null, got {i}")
        if self.context_noise_sigma < 0 or self.foreground_weight < 0:
            raise ValueError("objective.context_noise_sigma and objective.foreground_weight "
                             "must be >= 0")

    def draw_timestep_ids(self, batch: int, generator: torch.Generator | None = None
                          ) -> torch.Tensor:
        n = batch if self.per_sample_timesteps else 1
        dev = generator.device if generator is not None else "cpu"
        ids = torch.randint(0, NUM_TRAIN_TIMESTEPS, (n,), generator=generator, device=dev)
        return ids.cpu().expand(batch)

    def _lookup(self, ids: torch.Tensor, shift: float, dtype: torch.dtype | None):
        """ids -> (timestep told to the model, sigma, weight), each [B] float32, on the grid
        point nearest t_i after rounding t_i to ``dtype`` (as the fork does)."""
        sigmas, t, w = training_grid(shift)
        told = t[ids]
        if dtype is not None and dtype != torch.float32:
            told = told.to(dtype).float()
            ids = (t[None, :] - told[:, None]).abs().argmin(1)
        return told, sigmas[ids], w[ids]

    def loss(self, model, latents: torch.Tensor, actions: torch.Tensor,
             num_condition_latents: int = 2, generator: torch.Generator | None = None,
             noise: torch.Tensor | None = None,
             timestep_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of ``model`` (an ``ActionWanModel``) on normalised clip latents
        [B, C, F, h, w] and actions [B, T, D]. ``noise`` ([B, C, F, h, w]) and
        ``timestep_ids`` ([B] grid indices) replace the draws from ``generator``."""
        b, c, f, h, w = latents.shape
        n_c = num_condition_latents
        if not 0 < n_c < f:
            raise ValueError(f"num_condition_latents must be in [1, {f - 1}], got {n_c}")
        dev = latents.device
        gdev = generator.device if generator is not None else dev
        x0 = latents.float()
        if timestep_ids is None:
            timestep_ids = self.draw_timestep_ids(b, generator)
        dtype = (to_dtype(self.timestep_dtype, "objective.timestep_dtype")
                 if self.timestep_dtype is not None
                 else model.dtype if self.timestep_weights else None)
        told, sigma, weight = self._lookup(timestep_ids.cpu(), model.shift, dtype)
        noised_context = self.context_timestep_index is not None and n_c > 1
        if noise is None:  # the tabletop draws noise for the generated frames only
            shape = (b, c, f if noised_context else f - n_c, h, w)
            noise = torch.randn(shape, generator=generator, device=gdev).to(dev)
        eps = noise[:, :, -(f - n_c):].float()
        s = sigma.to(dev).view(b, 1, 1, 1, 1)
        x = [x0[:, :, :1]]
        if n_c > 1:
            ctx = x0[:, :, 1:n_c]
            if noised_context:
                _, sig_c, _ = self._lookup(torch.tensor([self.context_timestep_index]),
                                           model.shift, dtype)
                ctx = (1 - sig_c.to(dev)) * ctx + sig_c.to(dev) * noise[:, :, 1:n_c].float()
            x.append(ctx)
        x.append((1 - s) * x0[:, :, n_c:] + s * eps)
        x = torch.cat(x, 2)
        if self.context_noise_sigma > 0:
            ctx_eps = torch.randn(x[:, :, :n_c].shape, generator=generator, device=gdev).to(dev)
            x = torch.cat([x[:, :, :n_c] + self.context_noise_sigma * ctx_eps, x[:, :, n_c:]], 2)
        ts = torch.zeros(b, f, device=dev)
        ts[:, n_c:] = told.to(dev)[:, None]
        v = model.velocity(x, ts, actions)[:, :, n_c:]
        err = (v - (eps - x0[:, :, n_c:])) ** 2
        if self.foreground_weight > 0:
            fw = foreground_weights(x0[:, :, n_c:], x0[:, :, n_c - 1:n_c], self.foreground_weight)
            if not self.timestep_weights:
                return (err * fw).mean() / fw.mean()
            err = err * fw / fw.mean()
        if not self.timestep_weights:
            return err.mean()
        return (err.mean(dim=(1, 2, 3, 4)) * weight.to(dev)).mean()
