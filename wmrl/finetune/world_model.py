"""Data and measurements for training the action-conditioned Wan world model.

Clips are built by ``wmrl.world_model.clip_layout`` (``build_clip``), the layout
``WanWorldModelEnv.chunk_step`` feeds the model, so the model is trained on the distribution it
is run on.

The data and the measurements around the world-model trainer
(wmrl/finetune/world_model_module.py, ``WorldModelFinetune``: every training step is its):
episodes -> clips (``build_clips``); the VAE's latent statistics (``set_latent_stats``) after
its stage; the clips encoded once (``encode_clips``, posterior mean) for the DiT stage and
PACE; the clip sampling weights; VAE and next-chunk quality, open-loop replay against the
simulator; the simulator's evaluation scenes as initial states.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from wmrl.envs.initial_states import InitialStates
from wmrl.envs.train_pool import write_scene_frames
from wmrl.finetune.image_metrics import psnr, ssim, u8_video_to_unit
from wmrl.finetune.reward_evaluation import confusion_counts
from wmrl.io.pixels import u8_to_unit_torch, unit_to_u8_torch
from wmrl.sim.dataset import TrajectoryDataset
from wmrl.sim.tasks import task_by_name
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES, build_clip, chunk_actions


@dataclass
class ClipSet:
    """Clips of every chunk of every episode, held in memory."""
    frames: torch.Tensor  # uint8 [N, 13, H, W, 3]
    actions: torch.Tensor  # float32 [N, 13, 7]
    episode: torch.Tensor  # int64 [N]: index of the source episode in load order
    start: torch.Tensor  # int64 [N]: chunk start (executed actions before it)

    def __len__(self) -> int:
        return self.frames.shape[0]

    def video(self, idx) -> torch.Tensor:
        """float [B, 3, 13, H, W] in [-1, 1] (the env's uint8 -> unit mapping)."""
        return u8_to_unit_torch(self.frames[idx]).permute(0, 4, 1, 2, 3)


def load_episodes(dirs: Sequence[str | Path], tasks: Sequence[str] | None = None,
                  max_episodes: int | None = None) -> list:
    """Episodes of the trajectory datasets ``dirs`` (optionally only ``tasks``: names or
    instructions) in order."""
    want = None if not tasks else {task_by_name(t).instruction for t in tasks}
    eps = []
    for d in dirs:
        ds = TrajectoryDataset(d)
        for ep in ds:
            if want is None or ep.task in want:
                eps.append(ep)
                if max_episodes is not None and len(eps) >= max_episodes:
                    return eps
    if not eps:
        raise ValueError(f"no episodes for tasks {tasks} in {list(dirs)}")
    return eps


def build_clips(episodes: Sequence, condition_frames: int = CONDITION_FRAMES,
                chunk: int = CHUNK) -> ClipSet:
    frames, actions, ep_ids, starts = [], [], [], []
    for e, ep in enumerate(episodes):
        for s in range(0, max(len(ep), 1), chunk):
            f, a = build_clip(ep.frames, ep.actions, s, condition_frames, chunk)
            frames.append(f)
            actions.append(a)
            ep_ids.append(e)
            starts.append(s)
    return ClipSet(torch.from_numpy(np.stack(frames)), torch.from_numpy(np.stack(actions)),
                   torch.tensor(ep_ids), torch.tensor(starts))


@torch.no_grad()
def set_latent_stats(vae, clips: ClipSet, max_clips: int = 256, batch_size: int = 32) -> None:
    """Write the per-channel mean/std of the posterior mean over ``clips`` into the VAE config
    (``latents_mean`` / ``latents_std``), so normalised latents are ~N(0, 1) per channel."""
    n = min(len(clips), max_clips)
    mus = [vae.encode(clips.video(torch.arange(i, min(i + batch_size, n)))).latent_dist.mode()
           for i in range(0, n, batch_size)]
    mu = torch.cat(mus).transpose(0, 1).flatten(1)
    vae.register_to_config(latents_mean=mu.mean(1).tolist(),
                           latents_std=mu.std(1).clamp_min(1e-3).tolist())


def refresh_latent_buffers(model: ActionWanModel) -> None:
    """Copy the VAE config's latents_mean / latents_std into the model's normalisation
    buffers (they are read from the config only when the model is built)."""
    shape = model.latents_mean.shape
    model.latents_mean.copy_(torch.tensor(model.vae.config.latents_mean).view(shape))
    model.latents_std.copy_(torch.tensor(model.vae.config.latents_std).view(shape))


# ---------------------------------------------------------------------------- latents
@torch.no_grad()
def encode_clips(model: ActionWanModel, clips: ClipSet, batch_size: int = 32) -> torch.Tensor:
    """Normalised posterior-mean latents of every clip, float32 [N, C, 4, h, w], on the
    model's device."""
    dev = next(model.vae.parameters()).device
    out = [model.encode(clips.video(torch.arange(i, min(i + batch_size, len(clips)))).to(dev))
           for i in range(0, len(clips), batch_size)]
    return torch.cat(out)


def clip_sampling_weights(actions: torch.Tensor, gripper_event_weight: float = 1.0,
                          condition_frames: int = CONDITION_FRAMES) -> torch.Tensor:
    """Sampling weights [N] of clips (actions [N, cf + chunk, 7]): a clip whose gripper command
    flips sign between its last condition action and its last new one (a grasp, a release or a
    flicker) weighs ``gripper_event_weight``, others 1. On the tabletop data that is 26% of the
    noisy expert's clips (noise 0.6) and 74% of the SFT policy's, whose sampled gripper
    command flickers."""
    if gripper_event_weight <= 0:
        raise ValueError(f"gripper_event_weight must be > 0, got {gripper_event_weight}")
    grip = actions[:, condition_frames - 1 :, 6] > 0
    event = (grip[:, 1:] != grip[:, :-1]).any(1)
    return torch.where(event, float(gripper_event_weight), 1.0)


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def vae_quality(model: ActionWanModel, clips: ClipSet, max_clips: int = 64,
                batch_size: int = 16) -> dict[str, float]:
    """PSNR / SSIM of VAE reconstructions (uint8-rounded, as the env sees them)."""
    n = min(len(clips), max_clips)
    ps, ss = [], []
    for i in range(0, n, batch_size):
        idx = torch.arange(i, min(i + batch_size, n))
        rec = unit_to_u8_torch(model.decode(model.encode(clips.video(idx)))).permute(0, 2, 3, 4, 1)
        a, b = u8_video_to_unit(rec), u8_video_to_unit(clips.frames[idx])
        ps.append(psnr(a, b).flatten())
        ss.append(ssim(a, b).flatten())
    return {"vae_psnr": float(torch.cat(ps).mean()), "vae_ssim": float(torch.cat(ss).mean())}


@torch.no_grad()
def predict_chunk(model: ActionWanModel, cond: torch.Tensor, actions: torch.Tensor,
                   noise: torch.Tensor, num_inference_steps: int) -> torch.Tensor:
    """The new frames generated from condition latents and a clip's actions, in [0, 1]
    after the env's uint8 rounding: [B, T_new, H, W, 3]."""
    new = model.generate(cond, actions, noise, num_inference_steps)
    video = model.decode(torch.cat([cond, new], 2))[:, :, CONDITION_FRAMES:]
    return u8_video_to_unit(unit_to_u8_torch(video).permute(0, 2, 3, 4, 1))


def prediction_quality(model: ActionWanModel, clips: ClipSet, num_inference_steps: int,
                       max_clips: int = 128, batch_size: int = 32,
                       seed: int = 0) -> dict[str, float]:
    """Teacher-forced one-chunk prediction on held-out clips: generate the 8 new frames from
    the ground-truth condition frames and actions; PSNR / SSIM against the true frames, and
    the copy-last-condition-frame baseline on the same clips. ``next_chunk_psnr_other_actions``
    generates from the same frames and noise with the actions of clip (i + n/2) mod n: a world
    model that ignores its actions scores the same with both."""
    gen = torch.Generator().manual_seed(seed)
    n = min(len(clips), max_clips)
    n_cond = model.latent_frames(CONDITION_FRAMES)
    res: dict[str, list] = {"psnr": [], "ssim": [], "copy_psnr": [], "copy_ssim": [],
                            "psnr_other_actions": []}
    for i in range(0, n, batch_size):
        idx = torch.arange(i, min(i + batch_size, n))
        z = model.encode(clips.video(idx))
        cond = z[:, :, :n_cond]
        noise = torch.randn(z[:, :, n_cond:].shape, generator=gen)
        true = u8_video_to_unit(clips.frames[idx, CONDITION_FRAMES:])
        other = clips.actions[(idx + n // 2) % n]  # any batch size, even a last batch of 1
        pred = predict_chunk(model, cond, other, noise, num_inference_steps)
        res["psnr_other_actions"].append(psnr(pred, true).flatten())
        pred = predict_chunk(model, cond, clips.actions[idx], noise, num_inference_steps)
        res["psnr"].append(psnr(pred, true).flatten())
        copy = u8_video_to_unit(clips.frames[idx, CONDITION_FRAMES - 1 : CONDITION_FRAMES])
        copy = copy.expand_as(true)
        res["ssim"].append(ssim(pred, true).flatten())
        res["copy_psnr"].append(psnr(copy, true).flatten())
        res["copy_ssim"].append(ssim(copy, true).flatten())
    return {f"next_chunk_{k}": float(torch.cat(v).mean()) for k, v in res.items()}


def episode_initial_states(episodes: Sequence):
    """``InitialStates`` from the first frame and task of each episode (state i = episode i)."""
    tasks = [ep.task for ep in episodes]
    uniq = list(dict.fromkeys(tasks))
    return InitialStates(torch.from_numpy(np.stack([ep.frames[0] for ep in episodes])), tasks,
                         torch.tensor([uniq.index(t) for t in tasks]))


@torch.no_grad()
def open_loop_replay(env, episodes: Sequence, n_chunks: int, chunk: int = CHUNK,
                     stop_when_done: bool = False) -> list[dict]:
    """Reset ``env`` (built on ``episode_initial_states(episodes)``) and feed it each
    episode's actions chunk by chunk (``chunk_actions``); returns the info of every chunk."""
    env.reset(state_ids=torch.arange(len(episodes)))
    infos = []
    for c in range(n_chunks):
        acts = np.stack([chunk_actions(ep.actions, c, chunk) for ep in episodes])
        infos.append(env.chunk_step(torch.from_numpy(acts))[4])
        if stop_when_done and bool(env._done.all()):
            break
    return infos


REPLAY_THRESHOLDS = (0.5, 0.9, 0.99, 0.999)


def success_confusion(wm: np.ndarray, sim: np.ndarray) -> dict:
    """Confusion counts of imagined (``wm``) vs simulated (``sim``) success and the balanced
    accuracy 0.5 * (TPR + TNR): 0.5 = the imagined outcome says nothing about the real one
    (agreement alone looks fine when nearly every episode fails)."""
    tp, fp, tn, fn = confusion_counts(wm, sim)
    tpr, tnr = tp / max(tp + fn, 1), tn / max(tn + fp, 1)
    return {"agreement": (tp + tn) / max(len(wm), 1), "balanced_accuracy": 0.5 * (tpr + tnr),
            "wm_success": float(wm.mean()), "tp": tp, "tn": tn, "fp": fp, "fn": fn}


@torch.no_grad()
def replay_agreement(env_factory: Callable[[int, object], object], episodes: Sequence,
                     chunk: int = CHUNK, max_chunks: int | None = None,
                     batch_size: int = 64, *, success_threshold: float,
                     thresholds: Sequence[float] = REPLAY_THRESHOLDS) -> dict:
    """Open-loop replay: each held-out episode's actions, chunk by chunk, through a
    ``WanWorldModelEnv`` started from the episode's first frame; the world model's success
    (learned reward on imagined frames) vs the simulator's (the episode's privileged label
    over the same actions). ``env_factory(num_envs, initial_states)`` builds the env, whose
    reward must return raw p(success) (not rounded); episodes go through it ``batch_size``
    at a time, never terminated, so one replay scores every threshold: imagined success at
    threshold h = max_t p_t >= h (what the env's termination at h would give, success being
    sticky). ``replay_*`` keys are at ``success_threshold``; ``replay_by_threshold`` holds
    the sweep over ``thresholds``."""
    peak, sim, wall = [], [], 0.0
    for i in range(0, len(episodes), batch_size):
        eps = episodes[i : i + batch_size]
        env = env_factory(len(eps), episode_initial_states(eps))
        env.success_threshold = float("inf")  # never terminate: score all chunks
        n_chunks = max(math.ceil(len(ep) / chunk) for ep in eps)
        if max_chunks is not None:
            n_chunks = min(n_chunks, max_chunks)
        t0 = time.perf_counter()
        infos = open_loop_replay(env, eps, n_chunks, chunk)
        wall += time.perf_counter() - t0
        # chunks past an episode's end are hold actions: the block stays where it was
        peak.append(torch.stack([inf["scores"].amax(1) for inf in infos], 1).amax(1).numpy())
        sim.append(np.array([ep.success_labels[: n_chunks * chunk + 1].any() for ep in eps]))
    peak, sim = np.concatenate(peak), np.concatenate(sim)
    out = {"replay_episodes": len(peak), "replay_sim_success": float(sim.mean()),
           "replay_success_threshold": float(success_threshold)}
    out.update({f"replay_{k}": v for k, v in success_confusion(peak >= success_threshold,
                                                              sim).items()})
    out["replay_by_threshold"] = {str(h): success_confusion(peak >= h, sim)
                                  for h in thresholds}
    out["replay_seconds"] = wall
    return out


# ---------------------------------------------------------------------------- initial states
def write_sim_initial_states(out_dir: str | Path, tasks: Sequence[str], num_states: int,
                             eval_seed: int = 0, image_size: int | Sequence[int] = 64) -> Path:
    """The simulator's fixed evaluation scenes (states 0..n-1 of each task at ``eval_seed``)
    as world-model initial states: RL in the world model starts where evaluation starts."""
    size = tuple(image_size) if isinstance(image_size, (list, tuple)) else int(image_size)
    return write_scene_frames(out_dir, tasks, num_states, eval_seed, size)
