"""The reset-data importer: the release's dataset/ (traj*.npy, traj*_kir.npy) into
wmrl's initial-states format (first frames, tasks, KIR context)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wmrl.envs.initial_states import write_initial_states
from wmrl.io.atomic import write_text
from wmrl.pipeline.rlinf.common import (
    ImportRefused,
)
from wmrl.pipeline.rlinf.npy import load_npy
from wmrl.world_model.clip_layout import OPEN_GRIPPER


def _frame_image(frame: dict, path: Path, t: int) -> np.ndarray:
    img = frame.get("image")
    if img is None:  # as RLinf's reader: the first 3-D array when there is no 'image'
        img = next((v for v in frame.values() if isinstance(v, np.ndarray) and v.ndim == 3), None)
    if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3:
        raise ImportRefused(f"{path} frame {t}: no HWC image (keys {sorted(frame)})")
    if img.dtype != np.uint8:
        if not (np.issubdtype(img.dtype, np.number) and img.min() >= 0 and img.max() <= 255):
            raise ImportRefused(f"{path} frame {t}: image {img.dtype} outside [0, 255]")
        img = np.rint(img).astype(np.uint8)
    return img


def _frame_action(frame: dict, path: Path, t: int) -> np.ndarray:
    if "delta_action" not in frame:
        raise ImportRefused(f"{path} frame {t}: no 'delta_action' (keys {sorted(frame)})")
    return np.asarray(frame["delta_action"], dtype=np.float32).reshape(-1)


def _frame_task(frame: dict, path: Path) -> str:
    for key in ("instruction", "task"):
        if key in frame:
            v = frame[key]
            return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v)
    raise ImportRefused(f"{path} frame 0: no 'instruction' or 'task' (keys {sorted(frame)})")


@dataclass
class ResetData:
    """What ``read_reset_data`` found: per state its anchor frame, task, 4 context frames and
    their actions, and the file it came from."""
    files: list[str]
    anchors: np.ndarray
    tasks: list[str]
    context_frames: np.ndarray
    context_actions: np.ndarray
    kir_states: int


def read_reset_data(dataset: str | Path, enable_kir: bool = True,
                    context_frames: int = 4) -> ResetData:
    """The release's ``dataset/`` read and checked (every file through the restricted
    unpickler), state i = the i-th file in the order RLinf's reader takes them (sorted names;
    ``*_kir*`` files only with ``enable_kir``). As RLinf's WanEnv resets: the anchor is frame 0;
    a file with at least ``context_frames`` frames starts from its last ``context_frames``
    frames and their ``delta_action``s (KIR), a shorter one from frame 0 repeated with the
    env's reset actions (zeros, gripper open: ``OPEN_GRIPPER``)."""
    root = Path(dataset)
    if not root.is_dir():
        raise FileNotFoundError(f"--dataset {str(root)!r}: no such directory")
    files = sorted(p for p in root.glob("*.npy") if enable_kir or "_kir" not in p.name)
    if not files:
        raise ImportRefused(f"--dataset {str(root)!r}: no *.npy trajectory files")
    anchors, tasks, ctx_frames, ctx_actions, kir = [], [], [], [], 0
    for path in files:
        traj = load_npy(path)
        if traj.ndim != 1 or len(traj) == 0 or not all(isinstance(f, dict) for f in traj):
            raise ImportRefused(f"{path}: expected a sequence of per-frame dicts (RLinf's "
                                f"trajectory .npy), got {traj.dtype} {traj.shape}")
        anchor = _frame_image(traj[0], path, 0)
        action_dim = _frame_action(traj[0], path, 0).shape[0]
        if len(traj) >= context_frames:
            idx = range(len(traj) - context_frames, len(traj))
            ctx = np.stack([_frame_image(traj[t], path, t) for t in idx])
            acts = np.stack([_frame_action(traj[t], path, t) for t in idx])
            kir += 1
        else:
            ctx = np.repeat(anchor[None], context_frames, 0)
            acts = np.zeros((context_frames, action_dim), np.float32)
            acts[:, -1] = OPEN_GRIPPER
        if anchors and (anchor.shape != anchors[0].shape or ctx.shape[1:] != anchors[0].shape):
            raise ImportRefused(f"{path}: images {anchor.shape} differ from {files[0].name}'s "
                                f"{anchors[0].shape}")
        anchors.append(anchor)
        tasks.append(_frame_task(traj[0], path))
        ctx_frames.append(ctx)
        ctx_actions.append(acts)
    return ResetData([p.name for p in files], np.stack(anchors), tasks, np.stack(ctx_frames),
                     np.stack(ctx_actions), kir)


def write_reset_data(data: ResetData, out: str | Path) -> dict:
    """``<out>/initial_states/`` (wmrl's format, with KIR context for every state)."""
    dest = write_initial_states(Path(out) / "initial_states", data.anchors, data.tasks,
                                data.context_frames, data.context_actions)
    write_text(dest / "sources.json", json.dumps(data.files, indent=1))
    return {"initial_states": str(dest), "states": len(data.files),
            "kir_states": data.kir_states, "tasks": sorted(set(data.tasks)),
            "image": list(data.anchors[0].shape)}


def import_reset_data(dataset: str | Path, out: str | Path, enable_kir: bool = True,
                      context_frames: int = 4) -> dict:
    """``read_reset_data`` then ``write_reset_data``."""
    return write_reset_data(read_reset_data(dataset, enable_kir, context_frames), out)
