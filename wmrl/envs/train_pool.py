"""A pool of training scenes apart from every evaluation set (``task.train_pool``).

GRPO's groups start from initial states the env draws at random each step. By default those
are the task's ``eval_seed`` scenes, the very scenes the sim eval scores, so a policy can learn
them by heart. With ``task.train_pool: {seed, size}`` the groups start from ``size`` other
scenes of the task (state ids 0..size-1 drawn with ``seed``, a seed no evaluation uses); the
sim eval's ``eval_seed`` scenes are then never trained on, like its unseen set.

A world-model env starts from a scene's first camera frame, what a photo of the start gives a
real robot: the simulator renders each scene's first frame once (``initial_frames``, the frame
``TabletopEnv(eval_seed=seed).reset(state_id=i)`` shows) into an initial-states directory,
cached (``$WMRL_CACHE``, default ``~/.cache/wmrl``) and reused by every later run. The
simulator env (``env=tabletop_sim``) resets from the scenes themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, open_dict

from wmrl.envs.initial_states import load_initial_states, write_initial_states
from wmrl.errors import ConfigError
from wmrl.io.atomic import atomic_dir
from wmrl.sim.tabletop import initial_frames


def write_scene_frames(path, tasks, num_states: int, seed: int, image_size,
                       **env_kwargs) -> Path:
    """The first frames of scenes 0..n-1 of each task at ``seed``, rendered by the simulator,
    as an initial-states directory (written whole or not at all)."""
    frames, texts = [], []
    for task in tasks:
        f, t = initial_frames(task, num_states, seed=seed, image_size=image_size, **env_kwargs)
        frames.append(f)
        texts += t
    with atomic_dir(path, "initial_states") as tmp:
        write_initial_states(tmp, np.concatenate(frames), texts)
    return Path(path)


def pool_dir(task) -> Path:
    """Where ``task.train_pool``'s initial states live: its ``dir``, or the cache's folder
    named by everything that makes the frames (task, camera, size, seed, count)."""
    pool = task.train_pool
    if pool.get("dir"):
        return Path(pool.dir).expanduser()
    cache = Path(os.environ.get("WMRL_CACHE") or Path.home() / ".cache" / "wmrl").expanduser()
    h, w = task.image_size
    return cache / "train_pool" / (f"{task.name}-{task.camera}-{h}x{w}-"
                                   f"seed{pool.seed}-n{pool.size}")


def ensure_pool(task) -> Path:
    """The pool's initial-states directory, rendered by the simulator on first use (written
    whole or not at all); a directory already there must hold ``size`` states of the
    configured frame size."""
    path, pool = pool_dir(task), task.train_pool
    h, w = task.image_size
    if not path.exists():
        write_scene_frames(path, [task.name], pool.size, pool.seed, (h, w), camera=task.camera)
    states = load_initial_states(path)
    if len(states) != pool.size or tuple(states.frames.shape[1:3]) != (h, w):
        raise ConfigError(
            f"task.train_pool: {path} holds {len(states)} states of "
            f"{tuple(states.frames.shape[1:3])} px, the config asks for {pool.size} of {(h, w)}: "
            "remove the directory (it is rendered again) or set task.train_pool.dir")
    return path


def start_from_pool(cfg: DictConfig) -> DictConfig:
    """``cfg`` with the env starting from ``task.train_pool`` (unchanged when it is null): a
    world-model env's ``initial_states`` becomes the pool's directory, the simulator env's
    ``eval_seed`` / ``num_states`` the pool's."""
    task = cfg.get("task")
    if not task or task.get("train_pool") is None:
        return cfg
    env = cfg.env
    with open_dict(cfg):
        if "initial_states" in env:
            env.initial_states = str(ensure_pool(task))
        elif "eval_seed" in env and "num_states" in env:
            env.eval_seed, env.num_states = task.train_pool.seed, task.train_pool.size
        else:
            raise ConfigError(f"task.train_pool: env {env.get('_target_')} takes neither "
                              "initial_states nor eval_seed/num_states: set task.train_pool=null")
    return cfg
