"""Reward-model training frames from simulator trajectory datasets (wmrl.sim.dataset).

Every frame of every episode is a sample labelled with the simulator's privileged success
predicate for that frame. Failure frames vastly outnumber success frames (an episode has a
few success frames at its end), so ``negative_stride`` keeps every k-th failure frame of an
episode; training should still weight the classes (train_reward.py ``balance``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from wmrl.sim.dataset import TrajectoryDataset


def reward_frames_from_trajectories(
    dataset_dir: str | os.PathLike | Sequence[str | os.PathLike],
    tasks: Sequence[str] | None = None,
    negative_stride: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(frames uint8 [N, H, W, 3], labels uint8 [N] (1 = success), task_ids int64 [N],
    tasks list[str] (instruction strings, index = task id)) from one or several dataset dirs.

    ``tasks``: keep only these (names or instructions); ``negative_stride``: keep every k-th
    failure frame per episode (all success frames are kept)."""
    from wmrl.sim.tabletop import task_by_name

    dirs = [dataset_dir] if isinstance(dataset_dir, (str, os.PathLike)) else list(dataset_dir)
    if negative_stride < 1:
        raise ValueError(f"negative_stride must be >= 1, got {negative_stride}")
    want = None if not tasks else [task_by_name(t).instruction for t in tasks]
    names: list[str] = list(want or [])
    frames, labels, ids = [], [], []
    for d in dirs:
        for ep in TrajectoryDataset(d):
            if want is not None and ep.task not in want:
                continue
            if ep.task not in names:
                names.append(ep.task)
            y = ep.success_labels.astype(bool)
            neg = np.flatnonzero(~y)[::negative_stride]
            keep = np.sort(np.concatenate([np.flatnonzero(y), neg]))
            frames.append(ep.frames[keep])
            labels.append(y[keep].astype(np.uint8))
            ids.append(np.full(len(keep), names.index(ep.task), dtype=np.int64))
    if not frames:
        raise ValueError(f"no episodes (tasks={tasks}) in {[str(d) for d in dirs]}")
    return np.concatenate(frames), np.concatenate(labels), np.concatenate(ids), names


def vae_roundtrip(frames: np.ndarray, world_model_dir: str | os.PathLike,
                  batch_size: int = 256) -> np.ndarray:
    """frames uint8 [N, H, W, 3] -> the same frames encoded and decoded (one frame each) by
    the VAE of a world-model directory, uint8. Training the reward on these as well makes it
    judge the world model's blurrier frames as it judges simulator frames."""
    import torch

    from wmrl.envs.wan_env import unit_to_u8_torch
    from wmrl.world_model.action_wan import ActionWanModel

    model = ActionWanModel.from_pretrained(world_model_dir).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(frames), batch_size):
            x = torch.from_numpy(frames[i : i + batch_size]).float().div(127.5).sub(1.0)
            x = x.permute(0, 3, 1, 2)[:, :, None]  # [B, 3, 1, H, W]
            rec = model.decode(model.encode(x))[:, :, 0].permute(0, 2, 3, 1)
            out.append(unit_to_u8_torch(rec).numpy())
    return np.concatenate(out)
