"""Action-conditioned Wan video model: diffusers ``WanTransformer3DModel`` + ``AutoencoderKLWan``
plus two small action modules (WoVR / RLinf DiffSynth fork), attached through forward hooks on
diffusers' own submodules (diffusers' source is not patched).

Actions a in R^{B x T x D} (T = 13 pixel frames, D = 7) enter twice:

* cross-attention: ``action_mlp1`` (Linear D->dim, GELU, Linear dim->dim) gives one token per
  pixel frame; a hook on ``condition_embedder.text_embedder`` appends these T tokens to the
  projected text context, so cross-attention sees [text tokens ; action tokens].
* modulation: actions are grouped 4 per latent frame (the first action repeated 3x in front so
  the first latent frame, which holds 1 pixel frame, gets a full group), giving
  g in R^{B x T_lat x 4D}; ``action_mlp2`` (Linear 4D->4dim, SiLU, Linear 4dim->dim) maps each
  group to e_f; a hook on ``condition_embedder.time_embedder`` adds e_f to the per-token time
  embedding of every token of latent frame f (before ``time_proj``, so it reaches all
  shift/scale/gate terms and the output norm).

The per-token timestep (shape [B, seq_len], diffusers' Wan2.2 TI2V input) is 0 on the clean
condition latent frames and 1000*sigma on the frames being generated. The text prompt is fixed
(the reference conditions on the empty prompt): ``null_context`` [N_txt, text_dim] holds its
encoder output and is stored with the action modules.

On-disk layout (``save_pretrained`` / ``from_pretrained``)::

    <dir>/transformer/   diffusers WanTransformer3DModel (config.json + safetensors)
    <dir>/vae/           diffusers AutoencoderKLWan
    <dir>/action/        config.json + action_modules.safetensors
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, patchify
from safetensors.torch import load_file, save_file

from wmrl.io.atomic import atomic_dir
from wmrl.weights.dtypes import to_dtype
from wmrl.world_model.files import ACTION_WEIGHTS, CONFIG_FILES
from wmrl.world_model.sampler import euler_sample, inference_sigmas


def as_dtype(name: str | torch.dtype) -> torch.dtype:
    """A world model's ``dtype`` / ``vae_dtype``: a name of the one table (wmrl.weights.dtypes)."""
    return to_dtype(name, "world_model.dtype")


class ActionConditioner(nn.Module):
    """action_mlp1 (per-frame cross-attention tokens), action_mlp2 (per-latent-frame time
    embedding) and the fixed text context."""

    def __init__(
        self,
        dim: int,
        text_dim: int,
        action_dim: int = 7,
        actions_per_latent: int = 4,
        num_text_tokens: int = 4,
    ):
        super().__init__()
        self.dim, self.text_dim = dim, text_dim
        self.action_dim, self.actions_per_latent = action_dim, actions_per_latent
        self.num_text_tokens = num_text_tokens
        self.action_mlp1 = nn.Sequential(
            nn.Linear(action_dim, dim), nn.GELU(), nn.Linear(dim, dim)
        )
        group = actions_per_latent * action_dim
        self.action_mlp2 = nn.Sequential(
            nn.Linear(group, actions_per_latent * dim),
            nn.SiLU(),
            nn.Linear(actions_per_latent * dim, dim),
        )
        self.register_buffer("null_context", torch.zeros(num_text_tokens, text_dim))

    def config(self) -> dict[str, int]:
        return {
            "dim": self.dim,
            "text_dim": self.text_dim,
            "action_dim": self.action_dim,
            "actions_per_latent": self.actions_per_latent,
            "num_text_tokens": self.num_text_tokens,
        }

    def tokens(self, actions: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> cross-attention tokens [B, T, dim]."""
        return self.action_mlp1(actions)

    def latent_embedding(self, actions: torch.Tensor) -> torch.Tensor:
        """[B, T, D] with T = 1 + k*apl -> per-latent-frame embedding [B, 1 + k, dim]."""
        b, t, d = actions.shape
        apl = self.actions_per_latent
        if (t - 1) % apl:
            raise ValueError(f"actions must have 1 + {apl}*k frames, got shape {tuple(actions.shape)}")
        padded = torch.cat([actions[:, :1].expand(b, apl - 1, d), actions], dim=1)
        return self.action_mlp2(padded.reshape(b, (t - 1) // apl + 1, apl * d))


@dataclass
class AnchorCache:
    """Encoder state after the anchor frame (frame 0): its encoder output and the causal-conv
    feature cache that the next 4-frame group reads. Frame 0 never changes in an episode."""

    out: torch.Tensor
    feat_cache: list

    def select(self, rows: torch.Tensor) -> AnchorCache:
        return AnchorCache(
            self.out[rows],
            [c[rows] if torch.is_tensor(c) else c for c in self.feat_cache],
        )

    def to(self, device) -> AnchorCache:
        return AnchorCache(
            self.out.to(device),
            [c.to(device) if torch.is_tensor(c) else c for c in self.feat_cache],
        )


class ActionWanModel(nn.Module):
    """Wan DiT + VAE + action modules. Latents are normalised: z = (mu - mean) / std."""

    def __init__(
        self,
        transformer: WanTransformer3DModel,
        vae: AutoencoderKLWan,
        action: ActionConditioner,
        shift: float = 5.0,
    ):
        super().__init__()
        if transformer.config.added_kv_proj_dim is not None:
            raise ValueError(
                "world_model.transformer.added_kv_proj_dim must be null: diffusers' image-context "
                "path assumes exactly 512 text tokens, which the appended action tokens break"
            )
        if transformer.config.in_channels != vae.config.z_dim:
            raise ValueError(
                f"transformer in_channels ({transformer.config.in_channels}) must equal "
                f"vae z_dim ({vae.config.z_dim})"
            )
        inner = transformer.config.num_attention_heads * transformer.config.attention_head_dim
        if action.dim != inner or action.text_dim != transformer.config.text_dim:
            raise ValueError(
                f"action modules (dim {action.dim}, text_dim {action.text_dim}) do not match the "
                f"transformer (dim {inner}, text_dim {transformer.config.text_dim})"
            )
        self.transformer, self.vae, self.action = transformer, vae, action
        self.shift = float(shift)
        z = vae.config.z_dim
        self.register_buffer(
            "latents_mean", torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1), False
        )
        self.register_buffer(
            "latents_std", torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1), False
        )
        self._enc_conv_count = sum(isinstance(m, WanCausalConv3d) for m in vae.encoder.modules())
        self._pending_tokens: torch.Tensor | None = None
        self._pending_time: torch.Tensor | None = None
        emb = transformer.condition_embedder
        emb.text_embedder.register_forward_hook(self._append_action_tokens)
        emb.time_embedder.register_forward_hook(self._add_action_time_embedding)

    # ----------------------------------------------------------------- geometry
    @property
    def latent_channels(self) -> int:
        return self.vae.config.z_dim

    @property
    def spatial_ratio(self) -> int:
        return int(self.vae.config.scale_factor_spatial)

    @property
    def temporal_ratio(self) -> int:
        return int(self.vae.config.scale_factor_temporal)

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.dtype

    def latent_frames(self, num_frames: int) -> int:
        r = self.temporal_ratio
        if (num_frames - 1) % r:
            raise ValueError(f"num_frames must be 1 + {r}*k, got {num_frames}")
        return (num_frames - 1) // r + 1

    def latent_hw(self, height: int, width: int) -> tuple[int, int]:
        s = self.spatial_ratio
        _, ph, pw = self.transformer.config.patch_size
        if height % (s * ph) or width % (s * pw):
            raise ValueError(
                f"image size {height}x{width} must be divisible by {s * ph}x{s * pw} "
                f"(VAE spatial ratio {s} x transformer patch)"
            )
        return height // s, width // s

    # ----------------------------------------------------------------- hooks
    def _append_action_tokens(self, module, inputs, output):
        if self._pending_tokens is None:
            return None
        return torch.cat([output, self._pending_tokens.to(output.dtype)], dim=1)

    def _add_action_time_embedding(self, module, inputs, output):
        emb = self._pending_time
        if emb is None:
            return None
        b, f, d = emb.shape
        if output.ndim != 3 or output.shape[0] != b or output.shape[1] % f:
            raise RuntimeError(
                f"action time embedding [B={b}, T_lat={f}] needs a per-token timestep; "
                f"time embedding has shape {tuple(output.shape)}"
            )
        out = output.reshape(b, f, -1, d) + emb[:, :, None].to(output.dtype)
        return out.reshape(output.shape)

    # ----------------------------------------------------------------- VAE
    def normalize(self, mu: torch.Tensor) -> torch.Tensor:
        return (mu.float() - self.latents_mean) / self.latents_std

    def denormalize(self, z: torch.Tensor) -> torch.Tensor:
        return z.float() * self.latents_std + self.latents_mean

    def encode(self, video: torch.Tensor) -> torch.Tensor:
        """video in [-1, 1], [B, 3, T, H, W] -> normalised latents [B, C, T_lat, h, w] (float32,
        posterior mean)."""
        mu = self.vae.encode(video.to(self.vae.dtype)).latent_dist.mode()
        return self.normalize(mu)

    def encode_anchor(self, frame0: torch.Tensor) -> AnchorCache:
        """frame0 [B, 3, 1, H, W] -> encoder output + causal cache (as ``vae.encode`` leaves
        them after its first, single-frame group)."""
        x = frame0.to(self.vae.dtype)
        if self.vae.config.patch_size is not None:
            x = patchify(x, patch_size=self.vae.config.patch_size)
        cache: list = [None] * self._enc_conv_count
        out = self.vae.encoder(x, feat_cache=cache, feat_idx=[0])
        return AnchorCache(out, cache)

    def encode_with_anchor(self, anchor: AnchorCache, rest: torch.Tensor) -> torch.Tensor:
        """Same latents as ``encode(cat([frame0, rest], 2))`` without re-encoding frame 0.
        rest [B, 3, 4k, H, W]; the encoder replaces cache entries, never edits them in place,
        so a shallow copy of the list keeps ``anchor`` reusable."""
        r = self.temporal_ratio
        if rest.shape[2] % r:
            raise ValueError(f"frames after the anchor must be a multiple of {r}, got {rest.shape}")
        x = rest.to(self.vae.dtype)
        if self.vae.config.patch_size is not None:
            x = patchify(x, patch_size=self.vae.config.patch_size)
        cache = list(anchor.feat_cache)
        outs = [anchor.out]
        for i in range(x.shape[2] // r):
            outs.append(self.vae.encoder(x[:, :, r * i : r * (i + 1)], feat_cache=cache, feat_idx=[0]))
        h = self.vae.quant_conv(torch.cat(outs, 2))
        return self.normalize(torch.chunk(h, 2, dim=1)[0])

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """normalised latents -> video in [-1, 1], [B, 3, T, H, W] (float32)."""
        return self.vae.decode(self.denormalize(z).to(self.vae.dtype)).sample.float()

    # ----------------------------------------------------------------- DiT
    def velocity(self, x: torch.Tensor, timesteps: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """x [B, C, T_lat, h, w], timesteps [B, T_lat] (0..1000), actions [B, T, D] -> v (float32)."""
        b, _, f, h, w = x.shape
        if timesteps.shape != (b, f):
            raise ValueError(f"timesteps must be [B, T_lat] = {(b, f)}, got {tuple(timesteps.shape)}")
        if actions.shape[0] != b or self.latent_frames(actions.shape[1]) != f:
            raise ValueError(
                f"actions {tuple(actions.shape)} do not match {f} latent frames for batch {b}"
            )
        _, ph, pw = self.transformer.config.patch_size
        per_frame = (h // ph) * (w // pw)
        t_tok = timesteps[:, :, None].expand(b, f, per_frame).reshape(b, f * per_frame)
        dt = self.dtype
        acts = actions.to(dt)
        ctx = self.action.null_context.to(dt).expand(b, -1, -1)
        self._pending_tokens = self.action.tokens(acts)
        self._pending_time = self.action.latent_embedding(acts)
        try:
            out = self.transformer(x.to(dt), t_tok, ctx, return_dict=False)[0]
        finally:
            self._pending_tokens = self._pending_time = None
        return out.float()

    def generate(
        self,
        cond: torch.Tensor,
        actions: torch.Tensor,
        noise: torch.Tensor,
        num_steps: int,
        check_each_step: bool = False,
    ) -> torch.Tensor:
        """Denoise the new latent frames given clean condition latents (timestep 0), cfg 1.0.
        cond [B, C, Tc, h, w], noise [B, C, Tn, h, w] -> new latents [B, C, Tn, h, w]."""
        b, n_c = cond.shape[0], cond.shape[2]
        f = n_c + noise.shape[2]
        sigmas = inference_sigmas(num_steps, self.shift, device=noise.device)
        ts = torch.zeros(b, f, device=noise.device)

        def velocity(x_new, t):
            ts[:, n_c:] = t
            return self.velocity(torch.cat([cond, x_new], 2), ts, actions)[:, :, n_c:]

        return euler_sample(velocity, noise.float(), sigmas, check_each_step)

    # ----------------------------------------------------------------- I/O
    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ActionWanModel:
        """Random weights from config dicts {transformer, vae, action, shift, init_seed}."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(cfg.get("init_seed", 0)))
            tcfg = dict(cfg["transformer"])
            tcfg["patch_size"] = tuple(tcfg.get("patch_size", (1, 2, 2)))
            transformer = WanTransformer3DModel(**tcfg)
            vae = AutoencoderKLWan(**dict(cfg["vae"]))
            inner = transformer.config.num_attention_heads * transformer.config.attention_head_dim
            action = ActionConditioner(
                dim=inner, text_dim=transformer.config.text_dim, **dict(cfg.get("action", {}))
            )
        model = cls(transformer, vae, action, shift=cfg.get("shift", 5.0))
        dt, vdt = as_dtype(cfg.get("dtype", "float32")), as_dtype(cfg.get("vae_dtype", "float32"))
        if dt != torch.float32:
            model.transformer.to(dt)
            model.action.to(dt)
        if vdt != torch.float32:
            model.vae.to(vdt)
        return model

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, dtype="float32", vae_dtype="float32"
    ) -> ActionWanModel:
        root = Path(path)
        missing = [
            str(root / p)
            for p in (*CONFIG_FILES, f"action/{ACTION_WEIGHTS}")
            if not (root / p).is_file()
        ]
        if missing:
            raise FileNotFoundError(
                f"world_model.path={str(root)!r} is not an action-Wan directory; missing: "
                f"{missing}. Expected transformer/ and vae/ (diffusers format) and action/ "
                "(config.json + action_modules.safetensors), as written by save_pretrained."
            )
        transformer = WanTransformer3DModel.from_pretrained(root / "transformer", torch_dtype=as_dtype(dtype))
        vae = AutoencoderKLWan.from_pretrained(root / "vae", torch_dtype=as_dtype(vae_dtype))
        acfg = json.loads((root / "action" / "config.json").read_text())
        shift = acfg.pop("flow_shift", 5.0)
        action = ActionConditioner(**acfg)
        action.load_state_dict(load_file(str(root / "action" / ACTION_WEIGHTS)))
        action.to(as_dtype(dtype))
        return cls(transformer, vae, action, shift=shift)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write the three subfolders into a temp dir next to ``path``, then swap it in (only
        over a world model or an empty folder: ``wmrl.io.atomic.check_output_dir``)."""
        with atomic_dir(path, "world_model") as tmp:
            self.transformer.save_pretrained(tmp / "transformer")
            self.vae.save_pretrained(tmp / "vae")
            (tmp / "action").mkdir()
            acfg = dict(self.action.config(), flow_shift=self.shift)
            (tmp / "action" / "config.json").write_text(json.dumps(acfg, indent=2))
            state = {k: v.detach().float().contiguous() for k, v in self.action.state_dict().items()}
            save_file(state, str(tmp / "action" / ACTION_WEIGHTS))


def build_world_model(cfg: dict[str, Any] | ActionWanModel) -> ActionWanModel:
    """A model from ``cfg`` (picklable dict): ``path`` set -> from_pretrained, else random
    weights from the ``transformer``/``vae``/``action`` sub-configs."""
    if isinstance(cfg, ActionWanModel):
        return cfg
    cfg = dict(cfg)
    if cfg.get("path"):
        return ActionWanModel.from_pretrained(
            cfg["path"], cfg.get("dtype", "float32"), cfg.get("vae_dtype", "float32")
        )
    for key in ("transformer", "vae"):
        if key not in cfg:
            raise ValueError(f"world_model needs either `path` or a `{key}` config")
    return ActionWanModel.from_config(cfg)

