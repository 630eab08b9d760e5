"""Fine-tune the action-conditioned Wan world model as a LightningModule.

One training step: clips of 13 frames (anchor, 4 context frames, 8 new frames) and their
actions -> the frozen VAE's latents (4 latent frames) -> ``FlowMatchObjective.loss``
(objective.py: WoVR's objective, ``objective.preset=wovr``, proven equal to the DiffSynth fork
that trained it, or the tabletop's, ``preset=tabletop``) -> AdamW on the trainable
parameters: the whole DiT and the action modules (``lora: null``), or LoRA adapters on the
DiT's attention and feed-forward projections (peft, through diffusers' ``add_adapter``) plus,
with ``train_action_modules``, the action modules in full (a new robot's actions need them).

PACE (wmrl/pace/round.py) fine-tunes its world-model copy with this module too: the same
objective (``latent_loss``) and optimizer (``make_optimizer``) on its own clip buffer, between
GRPO steps, without a Trainer.

Validation, on held-out episodes: the objective at fixed draws (``val/loss``), and the 8 new
frames generated from the true condition frames and actions (``num_inference_steps`` Euler
steps, fixed noise) against the true ones: ``val/psnr``, ``val/ssim`` (torchmetrics, per
frame, after the env's uint8 rounding), beside the copy-the-last-frame baseline
(``val/copy_psnr``); the first clips' imagined | real frames go to
``<video_dir>/step_<N>.gif``.

Checkpoints hold the trainable parameters only (with LoRA: the adapters, megabytes at 5B);
the frozen rest comes from ``world_model.path`` again on resume, so ``strict_loading`` is off.
``export(out)`` folds the adapters into the DiT and writes a world-model directory that
``WanWorldModelEnv`` loads (``env.world_model.path=<out>``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from wmrl.algorithms.lr_schedule import lr_multiplier
from wmrl.errors import ConfigError
from wmrl.finetune.image_metrics import psnr, ssim, u8_video_to_unit
from wmrl.finetune.world_model import predict_chunk
from wmrl.lora import lora_config
from wmrl.pixels import u8_to_unit_torch
from wmrl.videos import save_gif, side_by_side_video
from wmrl.world_model.action_wan import build_world_model
from wmrl.world_model.clip_layout import CONDITION_FRAMES
from wmrl.world_model.objective import FlowMatchObjective

PRESETS = ("wovr", "tabletop")
# the DiffSynth fork's LoRA targets (q, k, v, o, ffn.0, ffn.2 of every block) in diffusers' names
DIT_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]


def build_objective(cfg: dict[str, Any] | None) -> FlowMatchObjective:
    """``{preset: wovr | tabletop, <FlowMatchObjective field>: value, ...}``."""
    cfg = dict(cfg or {})
    preset = cfg.pop("preset", "wovr")
    if preset not in PRESETS:
        raise ConfigError(f"objective.preset={preset!r} is not allowed: one of {PRESETS}")
    try:
        return FlowMatchObjective.wovr(**cfg) if preset == "wovr" else FlowMatchObjective(**cfg)
    except TypeError as e:
        raise ConfigError(f"objective: {e} (fields: per_sample_timesteps, "
                          "context_timestep_index, timestep_weights, timestep_dtype, "
                          "context_noise_sigma, foreground_weight)") from None


class WorldModelFinetune(L.LightningModule):
    def __init__(self, world_model: dict[str, Any], objective: dict[str, Any] | None = None,
                 lora: dict[str, Any] | None = None, train_action_modules: bool = True,
                 lr: float = 1e-5, weight_decay: float = 0.0, betas: tuple = (0.9, 0.999),
                 lr_schedule: str = "constant", warmup_steps: int = 0,
                 gradient_checkpointing: bool = False, num_inference_steps: int = 5,
                 video_clips: int = 2, video_dir: str | None = None, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.world_model_cfg = dict(world_model)
        self.objective = build_objective(objective)
        self.lora = None if lora is None else dict(lora)
        if self.lora is not None:
            lora_config(self.lora, DIT_LORA_TARGETS)  # bad settings fail before the model loads
        self.model = None
        self.strict_loading = False  # checkpoints hold the trainable parameters only
        self._val: dict[str, list[torch.Tensor]] = {}

    # ---------------------------------------------------------------- model
    def configure_model(self) -> None:
        if self.model is None:
            self.model = self._build()

    def _build(self):
        """The world model with the trainable parts marked (and the adapters, with LoRA)."""
        model = build_world_model(self.world_model_cfg)
        model.vae.requires_grad_(False).eval()
        model.transformer.requires_grad_(self.lora is None)
        model.action.requires_grad_(self.lora is None or self.hparams.train_action_modules)
        if self.lora is not None:
            # adapters: requires_grad
            model.transformer.add_adapter(lora_config(self.lora, DIT_LORA_TARGETS))
        if self.hparams.gradient_checkpointing:
            model.transformer.enable_gradient_checkpointing()
        return model

    def trainable_parameters(self) -> dict[str, torch.nn.Parameter]:
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        keep = set(self.trainable_parameters())
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if k in keep}

    def make_optimizer(self) -> torch.optim.AdamW:
        """AdamW over the trainable parameters (the Trainer's, and PACE's between its rounds)."""
        params = list(self.trainable_parameters().values())
        if not params:
            raise ConfigError("nothing to train: lora is null and the model is frozen?")
        return torch.optim.AdamW(params, lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                 weight_decay=self.hparams.weight_decay)

    def configure_optimizers(self):
        opt = self.make_optimizer()
        total = max(int(self.trainer.max_steps), 1) if self.trainer.max_steps > 0 else 1

        def multiplier(step: int) -> float:
            return lr_multiplier(step, total, self.hparams.lr_schedule,
                                 self.hparams.warmup_steps)

        sched = torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---------------------------------------------------------------- steps
    def _latents(self, frames: torch.Tensor) -> torch.Tensor:
        video = u8_to_unit_torch(frames).permute(0, 4, 1, 2, 3)  # [B, 3, 13, H, W]
        with torch.no_grad():
            return self.model.encode(video)

    def _generator(self, *key: int) -> torch.Generator:
        return torch.Generator().manual_seed(hash((self.hparams.seed, *key)) % (2 ** 63))

    def latent_loss(self, latents: torch.Tensor, actions: torch.Tensor,
                    generator: torch.Generator | None = None) -> torch.Tensor:
        """The objective on encoded clips (normalised latents [B, C, 4, h, w], actions
        [B, 13, D]): what a training step takes, and PACE's fine-tune on its clip buffer."""
        n_cond = self.model.latent_frames(CONDITION_FRAMES)
        return self.objective.loss(self.model, latents, actions, n_cond, generator)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        latents = self._latents(batch["frames"])
        gen = self._generator(self.global_step, self.global_rank)
        loss = self.latent_loss(latents, batch["actions"], gen)
        self.log("train/loss", loss, prog_bar=True, batch_size=latents.shape[0])
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val = {k: [] for k in ("loss", "psnr", "ssim", "copy_psnr", "imagined", "real")}

    @torch.no_grad()
    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        frames, actions = batch["frames"], batch["actions"]
        latents = self._latents(frames)
        n_cond = self.model.latent_frames(CONDITION_FRAMES)
        gen = self._generator(-1, batch_idx)  # the same draws at every validation
        b = latents.shape[0]
        loss = self.latent_loss(latents, actions, gen)
        noise = torch.randn(latents[:, :, n_cond:].shape, generator=gen).to(latents.device)
        pred = predict_chunk(self.model, latents[:, :, :n_cond], actions, noise,
                             self.hparams.num_inference_steps)  # [B, 8, 3, H, W] in [0, 1]
        true = u8_video_to_unit(frames[:, CONDITION_FRAMES:])
        copy = u8_video_to_unit(frames[:, CONDITION_FRAMES - 1:CONDITION_FRAMES]).expand_as(true)
        v = self._val
        v["loss"].append(loss.detach().float().expand(b).cpu())
        v["psnr"].append(psnr(pred, true).flatten().cpu())
        v["ssim"].append(ssim(pred, true).flatten().cpu())
        v["copy_psnr"].append(psnr(copy, true).flatten().cpu())
        kept = sum(len(x) for x in v["imagined"])
        if kept < self.hparams.video_clips:
            k = self.hparams.video_clips - kept
            v["imagined"].append(pred[:k].cpu())
            v["real"].append(true[:k].cpu())

    def on_validation_epoch_end(self) -> None:
        v = self._val
        if not v.get("psnr"):
            return
        metrics = {f"val/{k}": torch.cat(v[k]).mean() for k in ("loss", "psnr", "ssim",
                                                                  "copy_psnr")}
        self.log_dict(metrics, sync_dist=True)
        if self.hparams.video_dir and self.trainer.is_global_zero and v["imagined"]:
            # the clips stacked, each imagined | real ([N, T, 3, H, W] in [0, 1] -> uint8)
            u8 = [torch.cat(v[k]).permute(0, 1, 3, 4, 2).mul(255).round().to(torch.uint8).numpy()
                  for k in ("imagined", "real")]
            video = np.concatenate([side_by_side_video(a, b) for a, b in zip(*u8)], axis=1)
            out = Path(self.hparams.video_dir)
            out.mkdir(parents=True, exist_ok=True)
            save_gif(video, str(out / f"step_{self.global_step}.gif"), fps=5, scale=1)

    # ---------------------------------------------------------------- export
    def export(self, out: str | Path) -> Path | None:
        """Adapters folded into the DiT, the world-model directory written atomically. Call it
        on every rank after the fit: sharded (FSDP2) weights are gathered first, a collective,
        into a fresh copy that rank 0 writes; unsharded, the model is folded in place (the
        module is done training)."""
        model = self.model
        if any(isinstance(m, FSDPModule) for m in model.modules()):
            state = get_model_state_dict(
                model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if not self.trainer.is_global_zero:
                return None
            model = self._build()
            model.load_state_dict(state)
        if self.lora is not None:
            model.transformer.fuse_lora()
            model.transformer.unload_lora()
        model.save_pretrained(out)
        return Path(out)
