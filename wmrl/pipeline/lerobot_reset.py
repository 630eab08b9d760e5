"""Reset states from a LeRobot dataset (``scripts/import_lerobot.py``): where GRPO starts its
imagined episodes, in wmrl's format and in RLinf's, from one pass over the episodes.

Per episode e (frames f_0..f_{T-1}, actions a_0..a_{T-1}, a_t the action taken at f_t):

* a plain state: the anchor f_0, started as RLinf's ``WanEnv`` starts a one-frame
  ``trajN.npy``: f_0 in every condition slot, zero actions with the gripper open;
* with ``keyframes`` (KIR, Keyframe-Initialized Rollouts), one more state per fraction q:
  the keyframe k = max(C - 1, round(q (T - 1))) and its context, the C = ``context_frames``
  frames f_{k-C+1}..f_k with their actions - what RLinf's reader takes from a ``*_kir.npy``
  (frame 0, then frames ending at the keyframe: its last C frames), generation going on after
  f_k. The anchor (the reference slot) stays f_0.

Written: ``<out>/initial_states/`` (``wmrl.envs.initial_states``: the world-model env's
``initial_states``) and ``<out>/dataset/`` in RLinf's layout (``traj{e:06d}.npy`` holding f_0,
``traj{e:06d}_k{j}_kir.npy`` holding f_0 then f_{k-C+1}..f_k; per-frame dicts ``image``,
``delta_action``, ``instruction``), state i being the i-th file in sorted order, the order
RLinf's reader takes them: importing ``dataset/`` with ``import_reset_data`` gives the same
states. The actions are the dataset's own: the world model must be trained on the same
convention. Both folders are written whole or not at all, each only over a new or empty
folder or an earlier import (``wmrl.io.atomic.check_output_dir``; ``import_lerobot``, the
script's call, checks them first); whatever else ``<out>`` holds stays.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wmrl.envs.initial_states import write_initial_states
from wmrl.errors import ConfigError
from wmrl.io.atomic import atomic_dir, check_output_dir, write_text
from wmrl.lerobot.dataset import LeRobotDataset, LeRobotEpisode
from wmrl.world_model.clip_layout import OPEN_GRIPPER

CONTEXT_FRAMES = 4  # RLinf's target_n_frames = condition_frame_length - 1


def keyframe(length: int, fraction: float, context_frames: int = CONTEXT_FRAMES) -> int:
    """The keyframe index of an episode of ``length`` frames at ``fraction`` of it, late
    enough for a whole context before it."""
    return max(context_frames - 1, round(fraction * (length - 1)))


def _frame(image: np.ndarray, action: np.ndarray, task: str) -> dict:
    return {"image": image, "delta_action": action.astype(np.float32), "instruction": task}


def _save_trajectory(path: Path, frames: list[dict]) -> None:
    arr = np.empty(len(frames), dtype=object)
    arr[:] = frames
    np.save(path, arr, allow_pickle=True)


def episode_states(ep: LeRobotEpisode, keyframes: Sequence[float],
                   context_frames: int = CONTEXT_FRAMES) -> list[dict]:
    """The states of one episode, in file order: the plain one, then one per keyframe; each
    ``{name, anchor, context_frames, context_actions, trajectory}`` (trajectory: the RLinf
    file's frame list)."""
    frames, actions, task = ep.frames, ep.actions, ep.task
    rest = np.zeros((context_frames, actions.shape[1]), np.float32)
    rest[:, -1] = OPEN_GRIPPER
    states = [{"name": f"traj{ep.index:06d}.npy", "anchor": frames[0],
               "context_frames": np.repeat(frames[:1], context_frames, 0),
               "context_actions": rest, "trajectory": [_frame(frames[0], actions[0], task)]}]
    for j, q in enumerate(keyframes):
        k = keyframe(len(frames), q, context_frames)
        if k >= len(frames):
            continue  # shorter than one context: no keyframe state
        window = range(k - context_frames + 1, k + 1)
        states.append({
            "name": f"traj{ep.index:06d}_k{j}_kir.npy", "anchor": frames[0],
            "context_frames": frames[list(window)], "context_actions": actions[list(window)],
            "trajectory": [_frame(frames[0], actions[0], task)]
            + [_frame(frames[t], actions[t], task) for t in window]})
    return states


def reset_states_from_lerobot(dataset: LeRobotDataset, out: str | Path,
                              keyframes: Sequence[float] = (),
                              context_frames: int = CONTEXT_FRAMES) -> dict:
    """``<out>/initial_states/`` and ``<out>/dataset/`` from every episode of ``dataset``
    (module docstring); returns a summary (states, keyframe states, tasks, image size)."""
    bad = [q for q in keyframes if not 0 < q <= 1]
    if bad:
        raise ConfigError(f"--keyframes {bad}: fractions of an episode in (0, 1]")
    out = Path(out)
    names, anchors, tasks, ctx, acts = [], [], [], [], []
    with atomic_dir(out / "dataset", "import_lerobot") as traj_dir:
        for ep in dataset.episodes():  # one episode in memory at a time
            for s in episode_states(ep, keyframes, context_frames):
                _save_trajectory(traj_dir / s["name"], s["trajectory"])
                names.append(s["name"])
                anchors.append(s["anchor"])
                tasks.append(ep.task)
                ctx.append(s["context_frames"])
                acts.append(s["context_actions"])
        if not names:
            raise ConfigError(f"{dataset.root}: no episodes")
        order = sorted(range(len(names)), key=names.__getitem__)  # RLinf's reader's order
        with atomic_dir(out / "initial_states", "import_lerobot") as states_dir:
            write_initial_states(states_dir, np.stack([anchors[i] for i in order]),
                                 [tasks[i] for i in order], np.stack([ctx[i] for i in order]),
                                 np.stack([acts[i] for i in order]))
            write_text(states_dir / "sources.json",
                       json.dumps([names[i] for i in order], indent=1))
    return {"initial_states": str(out / "initial_states"), "dataset": str(out / "dataset"),
            "states": len(names), "kir_states": sum("_kir" in n for n in names),
            "tasks": sorted(set(tasks)), "image": list(anchors[0].shape)}


def import_lerobot(dataset: str | Path, out: str | Path, camera: str | None = None,
                   size: Sequence[int] | None = None, keyframes: Sequence[float] = (),
                   force: bool = False) -> dict:
    """``scripts/import_lerobot.py``: ``out``'s two folders, ``size`` (S or H W) and the
    dataset's metadata and camera checked before anything is written (a ``ConfigError``
    naming the flag), then ``reset_states_from_lerobot``; returns its summary."""
    if Path(out).is_file():
        raise ConfigError(f"--out={out} is a file: give a folder")
    for part in ("dataset", "initial_states"):
        check_output_dir(Path(out) / part, "import_lerobot", force)
    hw = None if size is None else tuple(list(size) * 2 if len(size) == 1 else size)
    if hw is not None and (len(hw) != 2 or min(hw) < 1):
        raise ConfigError(f"--size {list(size)}: S or H W, positive")
    ds = LeRobotDataset(dataset, camera=camera, size=hw)
    return reset_states_from_lerobot(ds, out, keyframes=keyframes)
