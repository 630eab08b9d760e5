"""The world-model trainer: the one place a training step of the action-conditioned Wan is
computed, as a LightningModule (the fine-tune on a dataset, scripts/finetune_world_model.py)
and without a Trainer (the asset build from scratch, scripts/train_world_model.py, and PACE's
refresh, wmrl/pace/round.py).

One training step (``step``, the same with and without a Trainer): the loss of a clip batch
-> backward -> the gradients' global norm clipped to ``grad_clip`` -> AdamW (``lr``,
``betas``, ``weight_decay``) -> the lr schedule (``lr_schedule`` with ``warmup_steps`` and
``lr_min_ratio``, ``wmrl.algorithms.lr_schedule``). What trains (``part``):

* ``dit`` (default): clips of 13 frames (anchor, 4 context frames, 8 new frames, the layout of
  wmrl/world_model/clip_layout.py) and their actions -> the frozen VAE's latents (4 latent
  frames) -> ``FlowMatchObjective.loss`` (objective.py: WoVR's objective,
  ``objective.preset=wovr``, proven equal to the DiffSynth fork that trained it, or the
  tabletop's, ``preset=tabletop``) on the whole DiT and the action modules (``lora: null``),
  or LoRA adapters on the DiT's attention and feed-forward projections (peft, through
  diffusers' ``add_adapter``) plus, with ``train_action_modules``, the action modules in full
  (a new robot's actions need them);
* ``vae``: the VAE on pixel clips with ``VaeObjective`` (vae_objective.py; the asset build's
  first stage), the DiT and action modules frozen.

Without a Trainer: ``begin_training(total_steps)`` builds the optimizer and schedule (kept
across calls: PACE's rounds go on with one optimizer), then ``fit_latents`` (the DiT on cached
latents) or ``fit_pixels`` (the VAE) draw random clip batches from one ``torch.Generator``
(the clip indices, then the objective's draws, step after step) and take ``step``.
``gripper_event_weight`` draws clips whose gripper command flips more often
(``clip_sampling_weights``). ``own_context_fraction`` f > 0: round(f * batch) clips of each
batch have the model's own imagined context (wmrl/finetune/own_context.py), replayed every
``own_context_refresh`` steps from ``own_context_episodes`` recorded episodes: the caller's
without a Trainer (``fit_latents(episodes=...)``), the datamodule's training episodes with
one (``own_context_replays``, the last clips of the loader's batch replaced).

Validation, on held-out episodes: the objective at fixed draws (``val/loss``), and the 8 new
frames generated from the true condition frames and actions (``num_inference_steps`` Euler
steps, fixed noise) against the true ones: ``val/psnr``, ``val/ssim`` (torchmetrics, per
frame, after the env's uint8 rounding), beside the copy-the-last-frame baseline
(``val/copy_psnr``); the first clips' imagined | real frames go to
``<video_dir>/step_<N>.gif``. With ``horizon_episodes`` N > 0, the first N held-out episodes
are also replayed open loop over the whole episode (``horizon_report``, the fidelity report
of ``scripts/wm_report.py``, handed in from above: the floor plan keeps finetune from
importing eval), its per-chunk lines printed and its last chunk's figures logged
(``horizon_metrics``: ``val/horizon_psnr`` beside ``val/horizon_copy_first_psnr``, each
block's ``val/horizon_<block>_median_px`` and ``_vanished``): the drift one chunk from true
frames never shows.

Checkpoints hold the trainable parameters only (with LoRA: the adapters, megabytes at 5B);
the frozen rest comes from ``world_model.path`` again on resume, so ``strict_loading`` is off.
``export(out)`` folds the adapters into the DiT and writes a world-model directory that
``WanWorldModelEnv`` loads (``env.world_model.path=<out>``).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from wmrl.algorithms.lr_schedule import LR_SCHEDULES, lr_multiplier
from wmrl.errors import ConfigError
from wmrl.finetune.image_metrics import psnr, ssim, u8_video_to_unit
from wmrl.finetune.own_context import own_context_clips
from wmrl.finetune.update import optimizer_step
from wmrl.finetune.world_model import ClipSet, clip_sampling_weights, predict_chunk
from wmrl.io.pixels import u8_to_unit_torch
from wmrl.io.videos import save_gif, side_by_side_video
from wmrl.sim.dataset import Episode
from wmrl.weights.lora import lora_config
from wmrl.world_model.action_wan import ActionWanModel, build_world_model
from wmrl.world_model.clip_layout import CONDITION_FRAMES
from wmrl.world_model.objective import FlowMatchObjective
from wmrl.world_model.vae_objective import VaeObjective

PRESETS = ("wovr", "tabletop")
PARTS = ("dit", "vae")
# the DiffSynth fork's LoRA targets (q, k, v, o, ffn.0, ffn.2 of every block) in diffusers' names
DIT_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2"]


def build_objective(cfg: dict[str, Any] | None, part: str = "dit"
                    ) -> FlowMatchObjective | VaeObjective:
    """``part=dit``: ``{preset: wovr | tabletop, <FlowMatchObjective field>: value, ...}``;
    ``part=vae``: ``{<VaeObjective field>: value, ...}``."""
    cfg = dict(cfg or {})
    if part == "vae":
        try:
            return VaeObjective(**cfg)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"objective (part=vae): {e} (fields: kl_weight, "
                              "foreground_weight, clip_frames)") from None
    preset = cfg.pop("preset", "wovr")
    if preset not in PRESETS:
        raise ConfigError(f"objective.preset={preset!r} is not allowed: one of {PRESETS}")
    try:
        return FlowMatchObjective.wovr(**cfg) if preset == "wovr" else FlowMatchObjective(**cfg)
    except TypeError as e:
        raise ConfigError(f"objective: {e} (fields: per_sample_timesteps, "
                          "context_timestep_index, timestep_weights, timestep_dtype, "
                          "context_noise_sigma, foreground_weight)") from None


def draw_clips(n: int, batch_size: int, generator: torch.Generator,
               weights: torch.Tensor | None = None) -> torch.Tensor:
    """``batch_size`` clip indices in [0, n), uniform or in proportion to ``weights`` (drawn
    with replacement). Uniform draws use ``randint`` (the stream of runs without weights)."""
    if weights is None:
        return torch.randint(n, (batch_size,), generator=generator)
    return torch.multinomial(weights, batch_size, replacement=True, generator=generator)


STAGE_KEYS = ("steps", "batch_size", "max_seconds", "log_every", "init_from")


def train_stage(model: ActionWanModel, part: str, stage: dict[str, Any], data, seed: int,
                log=print, episodes: Sequence[Episode] | None = None) -> list[float]:
    """One stage of the asset build (conf/train_world_model.yaml's ``vae_train`` or
    ``transformer_train``) without a Trainer: its keys but ``STAGE_KEYS`` are
    ``WorldModelFinetune`` settings; ``data`` a ``ClipSet`` (``part=vae``) or (cached latents,
    actions) (``part=dit``, with ``episodes`` the recorded episodes they were cut from, which
    ``own_context_fraction`` replays); one generator seeded with ``seed`` draws the clips and
    the objective's noise. Returns the loss per step."""
    # init_from is read by the build for vae_train only: on transformer_train it is refused
    stage_keys = STAGE_KEYS if part == "vae" else tuple(k for k in STAGE_KEYS if k != "init_from")
    settings = {k: v for k, v in stage.items() if k not in stage_keys}
    known = set(inspect.signature(WorldModelFinetune).parameters) - {"world_model", "part",
                                                                      "seed"}
    if set(settings) - known:
        key = "vae_train" if part == "vae" else "transformer_train"
        raise ConfigError(f"{key}: unknown settings {sorted(set(settings) - known)} (the "
                          f"stage's {list(stage_keys)} or WorldModelFinetune's {sorted(known)})")
    steps = int(stage["steps"])
    if steps <= 0:
        return []
    trainer = WorldModelFinetune(model, part=part, seed=seed, **settings)
    progress = dict(log_every=int(stage.get("log_every", 0)), log=log,
                    max_seconds=stage.get("max_seconds"))
    gen = torch.Generator().manual_seed(seed)
    if part == "vae":
        return trainer.fit_pixels(data, steps, int(stage["batch_size"]), gen, **progress)
    return trainer.fit_latents(*data, steps, int(stage["batch_size"]), gen, episodes=episodes,
                               **progress)


HORIZON_BLOCK_KEYS = ("median_px", "vanished")


def horizon_metrics(report: dict) -> dict[str, float]:
    """The headline figures of a fidelity report (``wmrl.eval.wm_fidelity.fidelity_report``)
    at its last chunk c = n_chunks, frame t = min(8c, T) of each episode:
    ``val/horizon_psnr`` (imagined x̂_t vs recorded x_t), ``val/horizon_copy_first_psnr`` (x_0
    vs x_t), per block ``val/horizon_<block>_median_px`` (median centre error in px over the
    episodes where both frames show it) and ``val/horizon_<block>_vanished`` (the share of the
    episodes showing it whose imagined frame lacks it), and ``val/horizon_chunks`` /
    ``val/horizon_episodes``. A figure the report has none of (null: a block never recorded,
    or never in both frames) is left out, not logged as NaN."""
    last = report["chunks"][-1]
    out = {"val/horizon_psnr": float(last["psnr"]),
           "val/horizon_copy_first_psnr": float(last["copy_first_psnr"]),
           "val/horizon_chunks": float(report["n_chunks"]),
           "val/horizon_episodes": float(report["n_episodes"])}
    for block, figures in last["blocks"].items():
        for key in HORIZON_BLOCK_KEYS:
            value = figures.get(key)
            if value is not None and np.isfinite(value):
                out[f"val/horizon_{block}_{key}"] = float(value)
    return out


class WorldModelFinetune(L.LightningModule):
    """See the module docstring. ``world_model``: a ``build_world_model`` config (``path`` or
    tiny sub-configs) or a built ``ActionWanModel`` (the asset build's)."""

    def __init__(self, world_model: dict[str, Any] | ActionWanModel,
                 objective: dict[str, Any] | None = None,
                 lora: dict[str, Any] | None = None, train_action_modules: bool = True,
                 lr: float = 1e-5, weight_decay: float = 0.0, betas: tuple = (0.9, 0.999),
                 lr_schedule: str = "constant", warmup_steps: int = 0,
                 lr_min_ratio: float = 0.0, grad_clip: float | None = None,
                 gripper_event_weight: float = 1.0, part: str = "dit",
                 gradient_checkpointing: bool = False, num_inference_steps: int = 5,
                 own_context_fraction: float = 0.0, own_context_refresh: int = 200,
                 own_context_episodes: int = 64,
                 video_clips: int = 2, video_dir: str | None = None,
                 horizon_episodes: int = 0, horizon_report: Callable | None = None,
                 seed: int = 0):
        super().__init__()
        built = isinstance(world_model, ActionWanModel)
        # horizon_report is a function: no hyperparameter (checkpoints load weights_only)
        self.save_hyperparameters(ignore=["horizon_report", *(["world_model"] if built else [])])
        if part not in PARTS:
            raise ConfigError(f"part={part!r} is not allowed: one of {PARTS}")
        if part == "vae" and lora is not None:
            raise ConfigError("lora is for the DiT: set lora=null with part=vae")
        if grad_clip is not None and grad_clip <= 0:
            raise ConfigError(f"grad_clip={grad_clip} must be > 0 or null (no clipping)")
        if gripper_event_weight <= 0:
            raise ConfigError(f"gripper_event_weight={gripper_event_weight} must be > 0")
        if not 0.0 <= own_context_fraction < 1.0:
            raise ConfigError(f"own_context_fraction={own_context_fraction} must be in [0, 1)")
        if own_context_refresh < 1 or own_context_episodes < 1:
            raise ConfigError(f"own_context_refresh={own_context_refresh} and "
                              f"own_context_episodes={own_context_episodes} must be >= 1")
        if lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"lr_schedule={lr_schedule!r} is not allowed: one of "
                              f"{LR_SCHEDULES}")
        if horizon_episodes < 0:
            raise ConfigError(f"horizon_episodes={horizon_episodes} must be >= 0 (0: off)")
        if horizon_episodes and horizon_report is None:
            raise ConfigError(f"horizon_episodes={horizon_episodes} needs horizon_report "
                              "(wmrl.eval.wm_fidelity.fidelity_report; "
                              "scripts/finetune_world_model.py passes it): pass it or set "
                              "horizon_episodes=0")
        self.horizon_report = horizon_report
        self.world_model_cfg = None if built else dict(world_model)
        self.objective = build_objective(objective, part)
        self.lora = None if lora is None else dict(lora)
        if self.lora is not None:
            lora_config(self.lora, DIT_LORA_TARGETS)  # bad settings fail before the model loads
        self.model = None
        self._trainable: list[str] = []
        if built:
            self.model = self._mark_trainable(world_model)
        self.strict_loading = False  # checkpoints hold the trainable parameters only
        self.automatic_optimization = False  # ``step`` updates, with or without a Trainer
        self.optimizer: torch.optim.Optimizer | None = None  # without a Trainer
        self.schedule: torch.optim.lr_scheduler.LambdaLR | None = None
        self._val: dict[str, list[torch.Tensor]] = {}
        self._own: tuple[torch.Tensor, torch.Tensor] | None = None  # own-context clips (Lightning)

    # ---------------------------------------------------------------- model
    def configure_model(self) -> None:
        if self.model is None:
            self.model = self._build()

    def _build(self) -> ActionWanModel:
        return self._mark_trainable(build_world_model(self.world_model_cfg))

    def _mark_trainable(self, model: ActionWanModel) -> ActionWanModel:
        """The trainable parts marked (and the adapters added, with LoRA)."""
        vae = self.hparams.part == "vae"
        model.vae.requires_grad_(vae)
        if not vae:
            model.vae.eval()
        model.transformer.requires_grad_(not vae and self.lora is None)
        model.action.requires_grad_(not vae and (self.lora is None
                                                 or self.hparams.train_action_modules))
        if self.lora is not None:
            # adapters: requires_grad
            model.transformer.add_adapter(lora_config(self.lora, DIT_LORA_TARGETS))
        if self.hparams.gradient_checkpointing:
            model.transformer.enable_gradient_checkpointing()
        self._trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        return model

    def trainable_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The parameters ``step`` updates (``model.``-prefixed names, in the model's order)."""
        params = dict(self.model.named_parameters())
        return {f"model.{n}": params[n] for n in self._trainable}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        keep = set(self.trainable_parameters())
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if k in keep}

    def make_optimizer(self) -> torch.optim.AdamW:
        """AdamW over the trainable parameters."""
        params = list(self.trainable_parameters().values())
        if not params:
            raise ConfigError("nothing to train: lora is null and the model is frozen?")
        return torch.optim.AdamW(params, lr=self.hparams.lr, betas=tuple(self.hparams.betas),
                                 weight_decay=self.hparams.weight_decay)

    def make_schedule(self, optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
        """lr of step k = lr * ``lr_multiplier(k, total_steps, lr_schedule, warmup_steps,
        lr_min_ratio)``, set after each step."""
        h = self.hparams
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_multiplier(
            k, total_steps, h.lr_schedule, h.warmup_steps, h.lr_min_ratio))

    def configure_optimizers(self):
        opt = self.make_optimizer()
        total = max(int(self.trainer.max_steps), 1)  # max_steps=-1 (unset): 1
        # stepped by ``step`` (manual optimization); Lightning saves and restores its state
        sched = self.make_schedule(opt, total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ---------------------------------------------------------------- the step
    def step(self, loss: torch.Tensor) -> float:
        """The one training update (module docstring) on ``loss``; returns it. Under a Trainer
        its optimizer, schedule and backward; without, ``begin_training``'s."""
        if self._trainer is not None:
            opt, sched, backward = self.optimizers(), self.lr_schedulers(), self.manual_backward
        else:
            if self.optimizer is None:
                raise RuntimeError("call begin_training(total_steps) before step() without a "
                                   "Trainer")
            opt, sched, backward = self.optimizer, self.schedule, None
        return optimizer_step(opt, loss, self.trainable_parameters().values(),
                              self.hparams.grad_clip, sched, backward)

    def begin_training(self, total_steps: int) -> None:
        """Without a Trainer: the optimizer and an lr schedule over ``total_steps`` (once:
        later calls keep them, as PACE's rounds do)."""
        self.configure_model()
        if self.optimizer is None:
            self.optimizer = self.make_optimizer()
            self.schedule = self.make_schedule(self.optimizer, max(int(total_steps), 1))

    def fit_latents(self, latents: torch.Tensor, actions: torch.Tensor, steps: int,
                    batch_size: int, generator: torch.Generator,
                    episodes: Sequence[Episode] | None = None, **progress) -> list[float]:
        """``steps`` steps of the DiT on random batches of cached clip latents [N, C, 4, h, w]
        (``encode_clips``) and their actions [N, 13, D]; returns the loss per step.
        ``progress``: ``log_every``, ``log``, ``max_seconds`` (a wall-time cap).

        With ``own_context_fraction`` f > 0, round(f * batch_size) clips of each batch have the
        model's own imagined context (wmrl/finetune/own_context.py): every
        ``own_context_refresh`` steps, from step 0, ``own_context_episodes`` of ``episodes``
        (the recorded episodes the latents come from) drawn at random are replayed open loop
        through the current model and their clips encoded; the rest of the batch as without."""
        if latents.shape[0] != actions.shape[0]:
            raise ValueError(f"{latents.shape[0]} latent clips but {actions.shape[0]} "
                             "action clips")
        h = self.hparams
        w = h.gripper_event_weight
        weights = None if w == 1.0 else clip_sampling_weights(actions.cpu(), w)
        n_own = round(h.own_context_fraction * batch_size)
        if n_own and not episodes:
            raise ConfigError("own_context_fraction > 0 replays recorded episodes through the "
                              "model: this caller gave none (set own_context_fraction=0)")
        own: dict[str, Any] = {"step": 0}

        def refresh_own(gen: torch.Generator) -> None:
            pick = torch.randperm(len(episodes), generator=gen)[: h.own_context_episodes]
            seed = int(torch.randint(2 ** 31, (1,), generator=gen))
            lat, act = own_context_clips(self.model, [episodes[i] for i in pick.tolist()],
                                         h.num_inference_steps, seed)
            # the env that replayed them froze the model (eval, no grad): train it again
            self.model.transformer.train()
            self.model.action.train()
            for p in self.trainable_parameters().values():
                p.requires_grad_(True)
            own.update(latents=lat, actions=act.to(latents.device))

        def batch_loss(gen: torch.Generator) -> torch.Tensor:
            if n_own and own["step"] % h.own_context_refresh == 0:
                refresh_own(gen)
            own["step"] += 1
            idx = draw_clips(len(latents), batch_size - n_own, gen, weights).to(latents.device)
            lat, act = latents[idx], actions[idx]
            if n_own and len(own["latents"]):
                j = torch.randint(len(own["latents"]), (n_own,), generator=gen)
                lat = torch.cat([lat, own["latents"][j.to(lat.device)]])
                act = torch.cat([act, own["actions"][j.to(act.device)]])
            return self.latent_loss(lat, act, gen)

        return self._fit(batch_loss, steps, generator, "dit", **progress)

    def fit_pixels(self, clips: ClipSet, steps: int, batch_size: int,
                   generator: torch.Generator, **progress) -> list[float]:
        """``steps`` steps of the VAE (``part=vae``) on random batches of ``clips``; returns
        the loss per step (``progress``: as ``fit_latents``)."""
        if self.hparams.part != "vae":
            raise ValueError("fit_pixels trains the VAE: build the trainer with part='vae'")
        bg = self.objective.background(clips.frames[:, 0], generator)

        def batch_loss(gen: torch.Generator) -> torch.Tensor:
            x = clips.video(draw_clips(len(clips), batch_size, gen))
            return self.objective.loss(self.model.vae, x, gen, bg)

        return self._fit(batch_loss, steps, generator, "vae", **progress)

    def _fit(self, batch_loss, steps: int, generator: torch.Generator, name: str,
             log_every: int = 0, log=None, max_seconds: float | None = None) -> list[float]:
        """The loop without a Trainer: ``step(batch_loss(generator))`` ``steps`` times; the
        trainable parts in train mode meanwhile, the model frozen in eval mode after."""
        self.begin_training(steps)
        model = self.model
        for p in self.trainable_parameters().values():
            p.requires_grad_(True)
        parts = [model.vae] if self.hparams.part == "vae" else [model.transformer, model.action]
        for m in parts:
            m.train()
        losses: list[float] = []
        t0 = time.time()
        try:
            for k in range(steps):
                losses.append(self.step(batch_loss(generator)))
                if log is not None and log_every and (k + 1) % log_every == 0:
                    log(f"{name} step {k + 1}/{steps} loss {np.mean(losses[-log_every:]):.4f} "
                        f"({time.time() - t0:.0f}s)")
                if max_seconds is not None and time.time() - t0 > max_seconds:
                    if log is not None:
                        log(f"{name}: stopping at step {k + 1}, max_seconds={max_seconds} "
                            "reached")
                    break
        finally:
            model.eval().requires_grad_(False)
        return losses

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
        [B, 13, D]): what a DiT training step takes."""
        n_cond = self.model.latent_frames(CONDITION_FRAMES)
        return self.objective.loss(self.model, latents, actions, n_cond, generator)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.hparams.part != "dit":
            raise ConfigError("the Lightning path trains the DiT (part=dit); the VAE stage "
                              "runs without a Trainer (fit_pixels)")
        frames, actions = batch["frames"], batch["actions"]
        gen = self._generator(self.global_step, self.global_rank)
        n_own = round(self.hparams.own_context_fraction * frames.shape[0])
        keep = frames.shape[0] - n_own
        latents = self._latents(frames[:keep])  # (the replaced clips are never encoded)
        if n_own:  # that share of the batch: clips with the model's own imagined context
            if self._own is None or self.global_step % self.hparams.own_context_refresh == 0:
                self._own = self.own_context_replays()
            own_lat, own_act = self._own
            j = torch.randint(len(own_lat), (n_own,), generator=gen).to(own_lat.device)
            latents = torch.cat([latents, own_lat[j]])
            actions = torch.cat([actions[:keep], own_act[j].to(actions.device)])
        loss = self.latent_loss(latents, actions, gen)
        self.step(loss)
        self.log("train/loss", loss.detach(), prog_bar=True, batch_size=latents.shape[0])
        return loss.detach()

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
        if self.hparams.horizon_episodes and not self.trainer.sanity_checking:
            data = self.trainer.datamodule
            if not hasattr(data, "held_out_episodes"):
                raise ConfigError(f"horizon_episodes={self.hparams.horizon_episodes} replays "
                                  "the held-out episodes of a WorldModelClipData: validate "
                                  "with datamodule=... or set horizon_episodes=0")
            episodes = data.held_out_episodes(self.hparams.horizon_episodes)
            self.log_dict(self.horizon_figures(episodes), sync_dist=True)

    @contextlib.contextmanager
    def _replaying(self):
        """The model in eval mode without grad for an open-loop replay (the env freezes the
        model it is given); the modules' train modes and requires_grad flags restored after.
        Every rank must replay the same episodes with the same noise: a sharded (FSDP) model
        needs the same forward calls on every rank."""
        model = self.model
        # FSDP2 keeps the root's gathered parameters registered after a forward: reshard so
        # the flags saved (and restored) are the sharded ones the optimizer holds
        sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for m in sharded:
            m.reshard()
        modes = [(m, m.training) for m in model.modules()]
        grads = [(p, p.requires_grad) for p in model.parameters()]
        try:
            with torch.no_grad():
                yield model.eval()
        finally:
            for m, training in modes:
                m.train(training)
            for p, needed in grads:
                p.requires_grad_(needed)
            for m in sharded:  # the next forward gathers afresh, with the flags restored
                m.reshard()

    def own_context_replays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The Lightning path's own-context clips (``fit_latents``' for the asset build):
        ``own_context_episodes`` training episodes of the datamodule (``train_records``),
        drawn with a generator of (``seed``, step) so every rank draws the same ones, replayed
        open loop through the current model (``own_context_clips``) -> (latents, actions)."""
        data = self.trainer.datamodule if self._trainer is not None else None
        if not hasattr(data, "train_records"):
            raise ConfigError("own_context_fraction > 0 replays training episodes of a "
                              "WorldModelClipData: fit with datamodule=... or set "
                              "own_context_fraction=0")
        h = self.hparams
        gen = self._generator(-2, self.global_step)  # the same on every rank
        pick = torch.randperm(len(data.train_episodes), generator=gen)[:h.own_context_episodes]
        episodes = data.train_records(pick.tolist())
        seed = int(torch.randint(2 ** 31, (1,), generator=gen))
        if self._trainer is None or self.trainer.is_global_zero:
            print(f"own-context replay at step {self.global_step}: {len(episodes)} training "
                  "episode(s) open loop through the model", flush=True)
        with self._replaying() as model:
            return own_context_clips(model, episodes, h.num_inference_steps, seed)

    def horizon_figures(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """``horizon_metrics`` of ``episodes`` replayed open loop over the whole episode
        (``horizon_report``: the env from each first frame, fed the recorded actions chunk by
        chunk, its own frames its context after the first chunk), in ``_replaying``. Every
        rank replays the same episodes with the same noise (seeded with ``seed``): medians and
        shares of episodes are not means that ranks could average; the figures do not depend
        on the number of ranks."""
        quiet = self._trainer is not None and not self.trainer.is_global_zero
        say = (lambda line: None) if quiet else print
        say(f"horizon replay at step {self.global_step}: {len(episodes)} held-out episode(s) "
            "open loop, each chunk's last frame against the recorded one")
        with self._replaying() as model:
            report, _ = self.horizon_report(
                model, episodes, num_inference_steps=self.hparams.num_inference_steps,
                seed=self.hparams.seed, log=say)
        return horizon_metrics(report)

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
