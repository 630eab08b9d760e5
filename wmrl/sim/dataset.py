"""On-disk trajectory dataset (simulator rollouts for world-model and reward training).

Layout of a dataset directory::

    meta.json                    format/version, image_size, action_dim, state_dim, tasks,
                                 shards [{"file", "n_episodes"}], n_episodes, extra info
    episodes-00000.safetensors   one shard of up to ``shard_size`` episodes
    ...

A shard concatenates its episodes along time (episode i's frames are rows
frame_offsets[i]:frame_offsets[i+1], its actions action_offsets[i]:action_offsets[i+1]):

    frames          uint8   [F, H, W, 3]  F = sum(T_i + 1): obs before each action + final
    success_labels  uint8   [F]           privileged success predicate per frame
    states          float32 [F, S]        privileged state vectors (tabletop.STATE_SLICES)
    actions         float32 [A, 7]        A = sum(T_i): the executed env actions
    frame_offsets   int64   [n + 1]
    action_offsets  int64   [n + 1]
    episode_success uint8   [n]           success at any frame (LIBERO's success_once)
    task_index      int64   [n]           index into meta["tasks"] (instruction strings)
    state_id        int64   [n]           fixed initial-state id, -1 for a random one

Only safetensors and JSON are read: nothing is unpickled. Every file is written to a
temporary name and moved into place (os.replace), and meta.json is rewritten after each
shard, so a crash loses at most the shard being filled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from wmrl.io.atomic import atomic_path, write_text

FORMAT = "wmrl-trajectories"
VERSION = 1


@dataclass
class Episode:
    frames: np.ndarray  # uint8 [T+1, H, W, 3]
    actions: np.ndarray  # float32 [T, 7]
    success_labels: np.ndarray  # bool [T+1]
    task: str
    states: np.ndarray | None = None  # float32 [T+1, S]
    state_id: int = -1

    @property
    def success(self) -> bool:
        return bool(self.success_labels.any())

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def validate(self, image_size: tuple[int, int] | None = None) -> None:
        t = self.actions.shape[0]
        if self.actions.ndim != 2 or self.actions.shape[1] != 7:
            raise ValueError(f"episode actions must be [T, 7], got {self.actions.shape}")
        if self.frames.dtype != np.uint8 or self.frames.ndim != 4 or self.frames.shape[-1] != 3:
            raise ValueError(f"episode frames must be uint8 [T+1, H, W, 3], got "
                             f"{self.frames.dtype} {self.frames.shape}")
        if self.frames.shape[0] != t + 1 or self.success_labels.shape != (t + 1,):
            raise ValueError(f"episode with {t} actions needs {t + 1} frames and labels, got "
                             f"{self.frames.shape[0]} and {self.success_labels.shape}")
        if image_size is not None and tuple(self.frames.shape[1:3]) != tuple(image_size):
            raise ValueError(f"episode frames are {self.frames.shape[1:3]}, dataset image_size "
                             f"is {tuple(image_size)}")
        if self.states is not None and self.states.shape[0] != t + 1:
            raise ValueError(f"episode states must have {t + 1} rows, got {self.states.shape}")


def _atomic_write_json(path: Path, obj: dict) -> None:
    write_text(path, json.dumps(obj, indent=2))


class TrajectoryWriter:
    """Append episodes; a shard is flushed every ``shard_size`` episodes and on ``close()``."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        image_size: tuple[int, int],
        tasks: list[str],
        state_dim: int = 0,
        shard_size: int = 100,
        extra_meta: dict | None = None,
        overwrite: bool = False,
    ):
        self.dir = Path(out_dir)
        if (self.dir / "meta.json").exists() and not overwrite:
            raise FileExistsError(f"{self.dir} already holds a dataset; pass overwrite=True or "
                                  "choose another output directory")
        self.dir.mkdir(parents=True, exist_ok=True)
        if shard_size < 1:
            raise ValueError(f"shard_size must be >= 1, got {shard_size}")
        self.image_size = tuple(int(x) for x in image_size)
        self.tasks = list(tasks)
        self.state_dim = state_dim
        self.shard_size = shard_size
        self.extra_meta = dict(extra_meta or {})
        self.shards: list[dict] = []
        self._pending: list[Episode] = []

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, episode: Episode) -> None:
        episode.validate(self.image_size)
        if episode.task not in self.tasks:
            self.tasks.append(episode.task)
        self._pending.append(episode)
        if len(self._pending) >= self.shard_size:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        eps, self._pending = self._pending, []
        lengths = np.array([len(e) for e in eps], dtype=np.int64)
        s = self.state_dim
        tensors = {
            "frames": np.concatenate([e.frames for e in eps]),
            "success_labels": np.concatenate([e.success_labels for e in eps]).astype(np.uint8),
            "states": np.concatenate(
                [
                    e.states.astype(np.float32)
                    if e.states is not None
                    else np.zeros((len(e) + 1, s), np.float32)
                    for e in eps
                ]
            ),
            "actions": np.concatenate([e.actions for e in eps]).astype(np.float32),
            "frame_offsets": np.concatenate([[0], np.cumsum(lengths + 1)]).astype(np.int64),
            "action_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "episode_success": np.array([e.success for e in eps], dtype=np.uint8),
            "task_index": np.array([self.tasks.index(e.task) for e in eps], dtype=np.int64),
            "state_id": np.array([e.state_id for e in eps], dtype=np.int64),
        }
        name = f"episodes-{len(self.shards):05d}.safetensors"
        with atomic_path(self.dir / name) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp)
        self.shards.append({"file": name, "n_episodes": len(eps)})
        self._write_meta()

    def _write_meta(self) -> None:
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "image_size": list(self.image_size),
            "action_dim": 7,
            "state_dim": self.state_dim,
            "tasks": self.tasks,
            "shards": self.shards,
            "n_episodes": sum(s["n_episodes"] for s in self.shards),
            **self.extra_meta,
        }
        _atomic_write_json(self.dir / "meta.json", meta)

    def close(self) -> None:
        self._flush()
        if not self.shards:
            self._write_meta()


class TrajectoryDataset:
    """Random access to the episodes of a dataset directory (one shard cached at a time)."""

    def __init__(self, path: str | os.PathLike):
        self.dir = Path(path)
        meta_path = self.dir / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{meta_path} not found: not a trajectory dataset "
                                    "(make one with scripts/collect.py)")
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("format") != FORMAT or self.meta.get("version") != VERSION:
            raise ValueError(f"{meta_path}: expected format {FORMAT!r} version {VERSION}, got "
                             f"{self.meta.get('format')!r} {self.meta.get('version')}")
        self.tasks: list[str] = self.meta["tasks"]
        self.image_size = tuple(self.meta["image_size"])
        counts = [s["n_episodes"] for s in self.meta["shards"]]
        self._shard_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._cache: tuple[int, dict[str, np.ndarray]] | None = None

    def __len__(self) -> int:
        return int(self._shard_start[-1])

    def _shard(self, k: int) -> dict[str, np.ndarray]:
        if self._cache is None or self._cache[0] != k:
            path = self.dir / self.meta["shards"][k]["file"]
            if not path.exists():
                raise FileNotFoundError(f"{path} listed in meta.json is missing")
            self._cache = (k, load_file(str(path)))
        return self._cache[1]

    def __getitem__(self, i: int) -> Episode:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"episode {i} out of range for {n} episodes")
        i %= n
        k = int(np.searchsorted(self._shard_start, i, side="right") - 1)
        j = i - int(self._shard_start[k])
        sh = self._shard(k)
        f0, f1 = sh["frame_offsets"][j], sh["frame_offsets"][j + 1]
        a0, a1 = sh["action_offsets"][j], sh["action_offsets"][j + 1]
        states = sh["states"][f0:f1]
        return Episode(
            frames=sh["frames"][f0:f1],
            actions=sh["actions"][a0:a1],
            success_labels=sh["success_labels"][f0:f1].astype(bool),
            task=self.tasks[int(sh["task_index"][j])],
            states=states if states.shape[1] > 0 else None,
            state_id=int(sh["state_id"][j]),
        )

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def success_rate(self) -> float:
        flags = [self._shard(k)["episode_success"] for k in range(len(self.meta["shards"]))]
        return float(np.concatenate(flags).mean()) if flags else float("nan")
