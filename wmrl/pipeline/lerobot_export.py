"""Our simulator's demonstrations as a LeRobot dataset (``scripts/export_lerobot.py``): a
``wmrl.sim.dataset.TrajectoryDataset`` (``scripts/collect.py``'s output) written by
``wmrl.lerobot.writer.write_lerobot`` in the v3.0 or v2.1 layout, one episode at a time, so
that LeRobot tooling, and wmrl's own LeRobot path (``scripts/import_lerobot.py``), read it.

Rows: an ``Episode`` holds T actions and T + 1 frames (the observation before each action, then
the final one); a LeRobot episode holds one row per frame with the action taken at that frame.
Row t < T is frame t with action t; the last row is the final frame with the last action
repeated (LeRobot's evaluation recorder pads its final observation row so), so every frame is
kept, the success frames at the end included. Per row also ``observation.state`` (the
privileged state, where the dataset records one; named after ``tabletop.STATE_SLICES`` when it
has their width), ``next.success`` and the task text.

``next.success`` of row t means what LeRobot's evaluation recorder means by it, the outcome of
the row's action: the success predicate of frame t + 1 (``success_labels[t + 1]``); the last
row, whose action is padding, keeps its own frame's.
Not exported: ``state_id`` (a fixed initial state's id) and the dataset's ``meta.json`` extras
(env settings, collection config).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from wmrl.errors import ConfigError
from wmrl.io.atomic import check_output_dir
from wmrl.lerobot.writer import write_lerobot
from wmrl.sim.dataset import Episode, TrajectoryDataset
from wmrl.sim.tasks import STATE_DIM, STATE_SLICES

DEFAULT_FPS = 10  # when the dataset does not record its control period
# The tabletop's (and LIBERO's) delta end-effector action.
ACTION_NAMES = ["dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"]


def state_names() -> list[str]:
    """``observation.state``'s names: ``hand_pos_0``, ..., ``held``, ... (STATE_SLICES order)."""
    names = []
    for key, s in STATE_SLICES.items():
        width = s.stop - s.start
        names += [key] if width == 1 else [f"{key}_{i}" for i in range(width)]
    return names


def open_trajectories(src: str | Path) -> TrajectoryDataset:
    """The dataset at ``src``, or a one-line ConfigError saying what is wrong with it."""
    try:
        ds = TrajectoryDataset(src)
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise ConfigError(f"{src}: not a trajectory dataset ({e}); make one with "
                          "scripts/collect.py") from None
    if len(ds) == 0:
        raise ConfigError(f"{src} holds no episodes: nothing to export")
    return ds


def dataset_fps(ds: TrajectoryDataset) -> int:
    """The control rate recorded by ``scripts/collect.py`` (``meta.json`` env.control_dt),
    else DEFAULT_FPS."""
    dt = (ds.meta.get("env") or {}).get("control_dt")
    return round(1 / dt) if isinstance(dt, (int, float)) and dt > 0 else DEFAULT_FPS


def lerobot_rows(ep: Episode, n: int) -> tuple:
    """One episode as the writer's (frames, actions, task, success, state), T + 1 rows."""
    if len(ep) == 0:
        raise ConfigError(f"episode {n} has no actions: LeRobot rows pair a frame with an "
                          "action; drop the episode")
    actions = np.concatenate([ep.actions, ep.actions[-1:]])
    after = np.concatenate([ep.success_labels[1:], ep.success_labels[-1:]])  # next.success
    return ep.frames, actions, ep.task, after, ep.states


def _episodes(ds: TrajectoryDataset, counts: list[int]) -> Iterator[tuple]:
    for n in range(len(ds)):
        try:
            ep = ds[n]
        except FileNotFoundError as e:  # a shard listed in meta.json and gone
            raise ConfigError(f"{ds.dir}: episode {n}: {e}") from None
        counts.append(len(ep) + 1)
        yield lerobot_rows(ep, n)


def export_lerobot(src: str | Path, out: str | Path, version: str = "v3.0",
                   camera_key: str = "observation.images.front", fps: int | None = None,
                   crf: int = 30, force: bool = False) -> dict:
    """Write the TrajectoryDataset at ``src`` as a LeRobot dataset at ``out`` (whole or not at
    all; an ``out`` holding anything but an earlier export is refused first unless ``force``:
    ``wmrl.io.atomic.check_output_dir``). ``fps``: None takes ``dataset_fps``. ``crf``: the
    video quality (30 is LeRobot's default). Returns a summary: episodes, frames, path, ..."""
    check_output_dir(out, "lerobot_dataset", force)
    ds = open_trajectories(src)
    fps = dataset_fps(ds) if fps is None else fps
    counts: list[int] = []
    names = state_names() if ds.meta.get("state_dim") == STATE_DIM else None
    write_lerobot(out, _episodes(ds, counts), fps, camera_key, version, crf=crf,
                  action_names=ACTION_NAMES, state_names=names, overwrite=True)  # checked
    return {"episodes": len(counts), "frames": sum(counts), "path": str(out),
            "version": version, "fps": fps, "camera_key": camera_key, "tasks": ds.tasks}
