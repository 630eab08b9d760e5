"""The frames + success labels a reward is trained on (``train_reward``'s ``data_format``):
``{"frames": uint8 [N, H, W, 3], "labels": float [N], "task_ids": long [N] | None,
"tasks": list[str] | None}`` from

- ``frames``: ``DATA/frames.safetensors`` with ``frames`` uint8 [N, H, W, 3], ``labels`` [N]
  (0/1) and optionally ``task_ids`` int [N]; ``DATA/tasks.json`` (list of task strings, index =
  id) for ``arch=resnet_task`` (adapt ``load_reward_dataset`` for other layouts);
- ``trajectories``: scripts/collect.py datasets (per-frame success labels, optionally with
  the world model's VAE reconstructions and open-loop replays: ``reward_data``);
- ``lerobot``: a LeRobot dataset (its recorded success, or ``lerobot.last_frames``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from wmrl.errors import ConfigError
from wmrl.finetune import reward_data


def load_reward_dataset(data_dir: str | Path) -> dict:
    """``data_format: frames`` (module docstring) from ``data_dir``."""
    root = Path(data_dir)
    path = root / "frames.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"data_dir {root}: missing frames.safetensors (tensors 'frames' "
                                "uint8 [N,H,W,3], 'labels' [N], optional 'task_ids' [N])")
    data = load_file(str(path))
    frames, labels = data.get("frames"), data.get("labels")
    if frames is None or labels is None:
        raise ValueError(f"{path}: needs tensors 'frames' and 'labels', has {sorted(data)}")
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"{path}: 'frames' must be uint8 [N,H,W,3], got {frames.dtype} "
                         f"{tuple(frames.shape)}")
    if labels.shape != frames.shape[:1]:
        raise ValueError(f"{path}: 'labels' shape {tuple(labels.shape)} != [N={frames.shape[0]}]")
    tasks_file = root / "tasks.json"
    task_ids = data.get("task_ids")
    return {
        "frames": frames,
        "labels": labels.float(),
        "task_ids": None if task_ids is None else task_ids.long(),
        "tasks": json.loads(tasks_file.read_text()) if tasks_file.is_file() else None,
    }


def load_trajectory_frames(cfg: dict) -> dict:
    """``data_format: trajectories``: frames + per-frame success labels from simulator
    trajectory datasets (``data_dir``: one dir or a list; see wmrl/finetune/reward_data.py)."""
    t = dict(cfg.get("trajectories") or {})
    frames, labels, task_ids, tasks = reward_data.reward_frames_from_trajectories(
        cfg["data_dir"], tasks=t.get("tasks"), negative_stride=int(t.get("negative_stride", 1)))
    if t.get("vae_from"):  # add VAE-reconstructed copies (the world model's look)
        frames = np.concatenate([frames, reward_data.vae_roundtrip(frames, t["vae_from"])])
        labels, task_ids = np.tile(labels, 2), np.tile(task_ids, 2)
    if t.get("imagined_from"):  # + the world model's open-loop replays, simulator-labelled
        f2, l2, i2, names = reward_data.imagined_frames(
            cfg["data_dir"], t["imagined_from"], int(t["num_inference_steps"]),
            tasks=t.get("tasks"), negative_stride=int(t.get("negative_stride", 1)))
        ids_map = np.array([tasks.index(n) if n in tasks else -1 for n in names])
        if (ids_map < 0).any():
            raise ValueError(f"imagined_from: tasks {names} differ from the dataset's {tasks}")
        frames, labels = np.concatenate([frames, f2]), np.concatenate([labels, l2])
        task_ids = np.concatenate([task_ids, ids_map[i2]])
    return {"frames": torch.from_numpy(frames), "labels": torch.from_numpy(labels).float(),
            "task_ids": torch.from_numpy(task_ids), "tasks": tasks}


def load_lerobot_frames(cfg: dict) -> dict:
    """``data_format: lerobot``: frames + per-frame success labels from a LeRobot dataset
    (``data_dir``; its recorded success, or ``lerobot.last_frames``; see
    wmrl/finetune/reward_data.py), at the model's image size."""
    lr = dict(cfg.get("lerobot") or {})
    frames, labels, task_ids, tasks = reward_data.reward_frames_from_lerobot(
        cfg["data_dir"], camera=lr.get("camera"), size=(cfg.get("model") or {}).get("image_size"),
        negative_stride=int(lr.get("negative_stride", 1)), last_frames=lr.get("last_frames"))
    return {"frames": torch.from_numpy(frames), "labels": torch.from_numpy(labels).float(),
            "task_ids": torch.from_numpy(task_ids), "tasks": tasks}


LOADERS = {"frames": lambda cfg: load_reward_dataset(cfg["data_dir"]),
           "trajectories": load_trajectory_frames, "lerobot": load_lerobot_frames}


def load_frames(cfg: dict) -> dict:
    """The dataset of ``cfg["data_format"]`` (``LOADERS``)."""
    fmt = cfg.get("data_format", "frames")
    if fmt not in LOADERS:
        raise ConfigError(f"data_format={fmt!r} is not allowed: one of {sorted(LOADERS)}")
    return LOADERS[fmt](cfg)
