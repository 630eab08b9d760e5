"""Reward-model training frames from simulator trajectory datasets (wmrl.sim.dataset).

Every frame of every episode is a sample labelled with the simulator's privileged success
predicate for that frame. Failure frames vastly outnumber success frames (an episode has a
few success frames at its end), so ``negative_stride`` keeps every k-th failure frame of an
episode; training should still weight the classes (train_reward.py ``balance``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.errors import ConfigError
from wmrl.finetune.world_model import episode_initial_states, open_loop_replay
from wmrl.io.pixels import u8_to_unit_torch, unit_to_u8_torch
from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.sim.dataset import TrajectoryDataset
from wmrl.sim.tasks import task_by_name
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES


def _keep(success: np.ndarray, negative_stride: int) -> np.ndarray:
    """Frame indices to keep: every success frame, every ``negative_stride``-th failure."""
    neg = np.flatnonzero(~success)[::negative_stride]
    return np.sort(np.concatenate([np.flatnonzero(success), neg]))


def reward_frames_from_trajectories(
    dataset_dir: str | os.PathLike | Sequence[str | os.PathLike],
    tasks: Sequence[str] | None = None,
    negative_stride: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(frames uint8 [N, H, W, 3], labels uint8 [N] (1 = success), task_ids int64 [N],
    tasks list[str] (instruction strings, index = task id)) from one or several dataset dirs.

    ``tasks``: keep only these (names or instructions); ``negative_stride``: keep every k-th
    failure frame per episode (all success frames are kept)."""
    dirs = [dataset_dir] if isinstance(dataset_dir, (str, os.PathLike)) else list(dataset_dir)
    if negative_stride < 1:
        raise ValueError(f"negative_stride must be >= 1, got {negative_stride}")
    want = None if not tasks else [task_by_name(t).instruction for t in tasks]
    out = labelled_frames(((ep.frames, ep.success_labels, ep.task) for d in dirs
                           for ep in TrajectoryDataset(d) if want is None or ep.task in want),
                          negative_stride, list(want or []))
    if out is None:
        raise ValueError(f"no episodes (tasks={tasks}) in {[str(d) for d in dirs]}")
    return out


def labelled_frames(episodes: Iterable[tuple[np.ndarray, np.ndarray, str]],
                    negative_stride: int, names: list[str]):
    """(frames, per-frame success, task) episodes -> (frames, labels uint8, task ids, task
    names) of every success frame and every ``negative_stride``-th failure; None if there
    were no episodes. ``names``: the task list to extend (its order gives the ids)."""
    frames, labels, ids = [], [], []
    for ep_frames, success, task in episodes:
        if task not in names:
            names.append(task)
        y = np.asarray(success, bool)
        keep = _keep(y, negative_stride)
        frames.append(ep_frames[keep])
        labels.append(y[keep].astype(np.uint8))
        ids.append(np.full(len(keep), names.index(task), dtype=np.int64))
    if not frames:
        return None
    return np.concatenate(frames), np.concatenate(labels), np.concatenate(ids), names


def frame_success(after: np.ndarray) -> np.ndarray:
    """Per-frame success [T] from LeRobot's ``next.success`` [T] (row t: the outcome of row t's
    action, so frame t + 1's): frame 0 is not a success, frame t is ``after[t - 1]``."""
    return np.concatenate([[False], np.asarray(after, bool)[:-1]])


def reward_frames_from_lerobot(
    path: str | os.PathLike, camera: str | None = None, size: Sequence[int] | None = None,
    negative_stride: int = 1, last_frames: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """``reward_frames_from_trajectories`` for a LeRobot dataset: its recorded success
    (``frame_success`` of ``next.success``), or with ``last_frames`` = k (a dataset of
    demonstrations that records no success, each ending in it) the last k frames of every
    episode labelled a success and the rest not. Frames of ``camera``, resized to ``size``."""
    if negative_stride < 1:
        raise ValueError(f"negative_stride must be >= 1, got {negative_stride}")
    if last_frames is not None and last_frames < 1:
        raise ConfigError(f"lerobot.last_frames={last_frames}: the success frames at the end "
                          "of each episode, >= 1 (or null: the recorded success)")
    ds = LeRobotDataset(path, camera=camera, size=None if size is None else tuple(size))

    def success(ep) -> np.ndarray:
        if last_frames is not None:
            return np.arange(len(ep.frames)) >= len(ep.frames) - last_frames
        if ep.success is None:
            raise ConfigError(f"{path}: records no success (next.success / success): set "
                              "lerobot.last_frames=K to label the last K frames of every "
                              "episode a success (a dataset of successful demonstrations)")
        return frame_success(ep.success)

    out = labelled_frames(((ep.frames, success(ep), ep.task) for ep in ds.episodes()),
                          negative_stride, [])
    if out is None:
        raise ConfigError(f"{path}: no episodes")
    return out


def vae_roundtrip(frames: np.ndarray, world_model_dir: str | os.PathLike,
                  batch_size: int = 256) -> np.ndarray:
    """frames uint8 [N, H, W, 3] -> the same frames encoded and decoded (one frame each) by
    the VAE of a world-model directory, uint8. Training the reward on these as well makes it
    judge the world model's blurrier frames as it judges simulator frames."""
    model = ActionWanModel.from_pretrained(world_model_dir).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(frames), batch_size):
            x = u8_to_unit_torch(torch.from_numpy(frames[i : i + batch_size]))
            x = x.permute(0, 3, 1, 2)[:, :, None]  # [B, 3, 1, H, W]
            rec = model.decode(model.encode(x))[:, :, 0].permute(0, 2, 3, 1)
            out.append(unit_to_u8_torch(rec).numpy())
    return np.concatenate(out)


class _NeverSuccess:
    """Reward stand-in for :func:`imagined_replays`: scores every frame 0 so no env ends early."""

    def __call__(self, frames, tasks):
        return torch.zeros(frames.shape[:2])


def imagined_frames(
    dataset_dir: str | os.PathLike | Sequence[str | os.PathLike],
    world_model_dir: str | os.PathLike,
    num_inference_steps: int,
    tasks: Sequence[str] | None = None,
    negative_stride: int = 1,
    batch_size: int = 64,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Open-loop replays of simulator episodes through the world model, labelled by the
    simulator: each episode's actions, chunk by chunk, go through a ``WanWorldModelEnv``
    started from its first frame, and imagined frame t (after action t-1) gets the privileged
    success label of simulator frame t. Same return layout as
    :func:`reward_frames_from_trajectories`.

    A reward trained on these learns what the simulator says about the world model's own
    imagination (drifted, blurred blocks included). That calibrates reward(world model(actions))
    only when imagined successes and failures look different; when they don't (the tabletop
    assets: AUC 0.55, docs/results.md), it teaches the reward to fire on the motion alone and raises
    false positives. The frames also serve to measure exactly that."""
    dirs = [dataset_dir] if isinstance(dataset_dir, (str, os.PathLike)) else list(dataset_dir)
    if negative_stride < 1:
        raise ValueError(f"negative_stride must be >= 1, got {negative_stride}")
    want = None if not tasks else [task_by_name(t).instruction for t in tasks]
    episodes = [ep for d in dirs for ep in TrajectoryDataset(d)
                if want is None or ep.task in want]
    if not episodes:
        raise ValueError(f"no episodes (tasks={tasks}) in {[str(d) for d in dirs]}")
    names = list(dict.fromkeys(want or [ep.task for ep in episodes]))
    model = ActionWanModel.from_pretrained(world_model_dir).eval()
    videos = imagined_replays(model, episodes, num_inference_steps, batch_size, seed)
    frames, labels, ids = [], [], []
    for video, ep in zip(videos, episodes):
        y = ep.success_labels[1:].astype(bool)  # sim label of frame t, t = 1..T
        keep = _keep(y, negative_stride)
        frames.append(video[keep])
        labels.append(y[keep].astype(np.uint8))
        ids.append(np.full(len(keep), names.index(ep.task), dtype=np.int64))
    return np.concatenate(frames), np.concatenate(labels), np.concatenate(ids), names


@torch.no_grad()
def imagined_replays(model: ActionWanModel, episodes: Sequence, num_inference_steps: int,
                     batch_size: int = 64, seed: int = 0,
                     context_noise_sigma: float = 0.0) -> list[np.ndarray]:
    """Each episode's open-loop replay in ``model``: a ``WanWorldModelEnv`` started from the
    episode's first frame is fed its actions chunk by chunk; uint8 [T, H, W, 3] per episode,
    imagined frame t + 1 after action t (frame i of the replay pairs with simulator frame
    i + 1). ``batch_size`` episodes are imagined together (one env, its noise seeded with
    ``seed`` + the batch's first index; ``context_noise_sigma``: the env's)."""
    h, w = episodes[0].frames.shape[1:3]
    device = next(model.transformer.parameters()).device
    videos = []
    for i in range(0, len(episodes), batch_size):
        eps = episodes[i : i + batch_size]
        n_chunks = max(-(-len(ep) // CHUNK) for ep in eps)
        env = WanWorldModelEnv(model, _NeverSuccess(), episode_initial_states(eps),
                               num_envs=len(eps), chunk=CHUNK,
                               condition_frames=CONDITION_FRAMES,
                               num_inference_steps=num_inference_steps,
                               max_episode_steps=n_chunks * CHUNK, seed=seed + i,
                               height=h, width=w, return_frames=True, device=str(device),
                               context_noise_sigma=context_noise_sigma)
        video = [info["frames"].cpu().numpy() for info in open_loop_replay(env, eps, n_chunks)]
        video = np.concatenate(video, 1)  # [b, n_chunks * CHUNK, H, W, 3]: frames 1..
        videos += [video[j, : len(ep)] for j, ep in enumerate(eps)]
    return videos
