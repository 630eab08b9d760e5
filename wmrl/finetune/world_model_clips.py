"""Training clips for the world-model fine-tune, streamed from episodes on disk.

An episode source is a LeRobot dataset (``format: lerobot``; frame t is the observation the
row's action was taken in, so T rows give T frames and T - 1 actions with a known outcome) or
our trajectory datasets (``format: trajectories``, T + 1 frames for T actions). Each episode
gives one clip per chunk of 8 actions, built by ``wmrl.world_model.clip_layout.build_clip`` (the
env's own model input: anchor, 4 context frames, 8 new frames, each with its action).

The last ``val_episodes`` episodes are held out (the validation clips: the first chunks of
each, in order; ``held_out_episodes``: the first of them whole, for the replay over the whole
episode). Training clips stream: each pass visits the training episodes in a seeded
permutation, one episode in memory at a time, clips mixed through a ``shuffle_buffer``; with
several ranks (or loader workers) each takes every k-th episode of the permutation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from wmrl.errors import ConfigError
from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.sim.dataset import Episode, TrajectoryDataset
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES, build_clip

FORMATS = ("lerobot", "trajectories")


@dataclass
class EpisodeSource:
    """Random access to episodes as (frames uint8 [T + 1, H, W, 3], actions float32 [T, D])."""

    format: str
    paths: list[str]
    camera: str | None = None
    size: tuple[int, int] | None = None

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ConfigError(f"data.format={self.format!r} is not allowed: one of {FORMATS}")
        if not self.paths:
            raise ConfigError("data.paths is empty: give a LeRobot dataset folder or "
                              "trajectory dataset folders")
        for p in self.paths:
            if not Path(p).is_dir():
                raise ConfigError(f"data.paths: {p} is not a folder")
        if self.format == "lerobot":
            if len(self.paths) != 1:
                raise ConfigError("data.paths: one LeRobot dataset (merge datasets with LeRobot's "
                                  "tools first)")
            self._lerobot = LeRobotDataset(self.paths[0], camera=self.camera,
                                           size=None if self.size is None else tuple(self.size))
            self._index = list(range(self._lerobot.num_episodes))
        else:
            self._sets = [TrajectoryDataset(p) for p in self.paths]
            self._index = [(k, i) for k, ds in enumerate(self._sets) for i in range(len(ds))]

    def __len__(self) -> int:
        return len(self._index)

    def episode(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        ep = self.record(i)
        return ep.frames, ep.actions

    def record(self, i: int) -> Episode:
        """Episode i whole: frames, actions, success labels per frame, task (a trajectory
        episode's simulator states too)."""
        if self.format == "lerobot":
            ep = self._lerobot.episode(self._index[i])
            labels = np.zeros(len(ep.frames), bool)
            if ep.success is not None:
                labels[1:] = ep.success[:-1]  # row t's next.success is frame t + 1's
            # the last row's outcome frame is not recorded: T rows, T - 1 actions
            return Episode(ep.frames, ep.actions[:-1], labels, ep.task)
        k, j = self._index[i]
        ep = self._sets[k][j]
        frames = ep.frames
        if self.size is not None and tuple(frames.shape[1:3]) != tuple(self.size):
            raise ConfigError(f"data.size={list(self.size)}: {self.paths[k]} holds "
                              f"{frames.shape[1]}x{frames.shape[2]} frames (data.size resizes "
                              "LeRobot datasets only): set data.size=null")
        return ep


def episode_clips(frames: np.ndarray, actions: np.ndarray) -> Iterator[dict[str, torch.Tensor]]:
    for s in range(0, max(len(actions), 1), CHUNK):
        f, a = build_clip(frames, actions, s, CONDITION_FRAMES, CHUNK)
        yield {"frames": torch.from_numpy(np.ascontiguousarray(f)), "actions": torch.from_numpy(a)}


class TrainClips(IterableDataset):
    """Endless stream of training clips (see the module doc); pass ``epoch`` k of the seeded
    permutations starts where a resumed run's step count puts it (``start_pass``)."""

    def __init__(self, source: EpisodeSource, episodes: Sequence[int], seed: int,
                 shuffle_buffer: int, rank: int = 0, world_size: int = 1, start_pass: int = 0):
        self.source, self.episodes = source, list(episodes)
        self.seed, self.shuffle_buffer = seed, max(int(shuffle_buffer), 1)
        self.rank, self.world_size, self.start_pass = rank, world_size, start_pass

    def __iter__(self):
        info = get_worker_info()
        workers, wid = (1, 0) if info is None else (info.num_workers, info.id)
        stride, offset = self.world_size * workers, self.rank * workers + wid
        rng = np.random.default_rng([self.seed, offset])
        buf: list = []
        k = self.start_pass
        while True:
            order = np.random.default_rng([self.seed, k]).permutation(self.episodes)
            for i in order[offset::stride]:
                for clip in episode_clips(*self.source.episode(int(i))):
                    buf.append(clip)
                    if len(buf) >= self.shuffle_buffer:
                        yield buf.pop(int(rng.integers(len(buf))))
            k += 1


class ValClips(Dataset):
    """The held-out clips: the first ``chunks_per_episode`` chunks of each held-out episode."""

    def __init__(self, source: EpisodeSource, episodes: Sequence[int], chunks_per_episode: int):
        self.clips = []
        for i in episodes:
            for c, clip in enumerate(episode_clips(*source.episode(int(i)))):
                if c >= chunks_per_episode:
                    break
                self.clips.append(clip)

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.clips[i]


class WorldModelClipData(L.LightningDataModule):
    """Train / held-out clips of one episode source (``data`` in conf/finetune_world_model)."""

    def __init__(self, format: str, paths: Sequence[str], batch_size: int = 1,
                 val_episodes: int = 1, val_chunks_per_episode: int = 2,
                 camera: str | None = None, size: Sequence[int] | None = None,
                 shuffle_buffer: int = 64, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.source = EpisodeSource(format, [str(p) for p in paths], camera,
                                    None if size is None else tuple(size))
        n = len(self.source)
        if not 0 <= val_episodes < n:
            raise ConfigError(f"data.val_episodes={val_episodes} must leave training episodes: "
                              f"the data holds {n}")
        if batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size} must be >= 1")
        self.train_episodes = list(range(n - val_episodes))
        self.val_episodes = list(range(n - val_episodes, n))
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.shuffle_buffer, self.val_chunks = shuffle_buffer, val_chunks_per_episode
        self._val: ValClips | None = None
        self._held_out: list[Episode] = []

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        steps_done = trainer.global_step if trainer else 0
        clips = TrainClips(self.source, self.train_episodes, self.seed, self.shuffle_buffer,
                           rank, world, start_pass=steps_done)  # a resume draws afresh
        return DataLoader(clips, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_episodes:
            return []
        if self._val is None:
            self._val = ValClips(self.source, self.val_episodes, self.val_chunks)
        return DataLoader(self._val, batch_size=self.batch_size, shuffle=False)

    def train_records(self, picks: Sequence[int]) -> list[Episode]:
        """Training episodes ``picks`` (indices into ``train_episodes``) whole: what the
        trainer's own-context clips replay (``WorldModelFinetune.own_context_replays``)."""
        return [self.source.record(self.train_episodes[int(i)]) for i in picks]

    def held_out_episodes(self, n: int) -> list[Episode]:
        """The first ``n`` held-out episodes whole (``WorldModelFinetune``'s replay over the
        whole episode at each validation), read once."""
        n = min(n, len(self.val_episodes))
        if len(self._held_out) < n:
            self._held_out = [self.source.record(i) for i in self.val_episodes[:n]]
        return self._held_out[:n]
