"""Reset states for world-model envs: initial frames + task text (+ optional KIR context).

On-disk format (a directory)::

    initial_states.safetensors
        frames           uint8   [N, H, W, 3]     the episode's first image (the anchor)
        task_ids         int64   [N]              index into the task list
        context_frames   uint8   [N, 4, H, W, 3]  optional, KIR: a key frame and the 3 before
                                                  it (oldest first; the last one is the key frame)
        context_actions  float32 [N, 4, 7]        optional, KIR: the actions that led to them
    tasks.json          {"format": "wmrl.initial_states/v1", "tasks": [str per state]}

KIR reset (key-frame initial reset): the episode keeps ``frames[i]`` as the anchor and starts
from ``context_frames[i]`` as its last 4 condition frames, with ``context_actions[i]`` as the
condition actions, instead of repeating the initial frame with zero actions.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from wmrl.io.atomic import atomic_path, write_text

FORMAT = "wmrl.initial_states/v1"
TENSORS = "initial_states.safetensors"
TASKS = "tasks.json"


def seed_reset_generator(generator: torch.Generator, seed: int) -> None:
    """Seed the generator that draws reset states (offset from the env's noise seed)."""
    generator.manual_seed(int(seed) + 7919)


def group_state_ids(state_ids, groups: int, group_size: int, num_states: int,
                    generator: torch.Generator) -> torch.Tensor:
    """Per-env state ids [groups * group_size]: ``state_ids`` (one per group) or, if None, a
    draw from ``generator``; consecutive ``group_size`` envs share their group's state. The
    world-model env and the simulator env both reset through this, so the same seed gives the
    same scenes."""
    if state_ids is None:
        state_ids = torch.randint(0, num_states, (groups,), generator=generator)
    ids = torch.as_tensor(state_ids, dtype=torch.long).flatten()
    if ids.shape != (groups,) or ids.min() < 0 or ids.max() >= num_states:
        raise ValueError(f"state_ids must be {groups} ids (num_envs/group_size) in "
                         f"[0, {num_states}), got {ids.tolist()}")
    return ids.repeat_interleave(group_size)


@dataclass
class InitialStates:
    frames: torch.Tensor  # uint8 [N, H, W, 3]
    tasks: list[str]  # one per state
    task_ids: torch.Tensor  # int64 [N]
    context_frames: torch.Tensor | None = None  # uint8 [N, 4, H, W, 3]
    context_actions: torch.Tensor | None = None  # float32 [N, 4, D]

    def __post_init__(self):
        n = self.frames.shape[0]
        if self.frames.dtype != torch.uint8 or self.frames.ndim != 4 or self.frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 [N, H, W, 3], got {self.frames.dtype} "
                             f"{tuple(self.frames.shape)}")
        if len(self.tasks) != n or self.task_ids.shape != (n,):
            raise ValueError(f"need one task per state: {n} frames, {len(self.tasks)} tasks, "
                             f"task_ids {tuple(self.task_ids.shape)}")
        if (self.context_frames is None) != (self.context_actions is None):
            raise ValueError("context_frames and context_actions must be given together")
        if self.context_frames is not None:
            cf, ca = self.context_frames, self.context_actions
            if cf.dtype != torch.uint8 or cf.shape[0] != n or cf.shape[2:] != self.frames.shape[1:]:
                raise ValueError(f"context_frames must be uint8 [N={n}, K, H, W, 3] like frames "
                                 f"{tuple(self.frames.shape)}, got {cf.dtype} {tuple(cf.shape)}")
            if ca.ndim != 3 or ca.shape[:2] != cf.shape[:2]:
                raise ValueError(f"context_actions must be [N, K, D] with N, K = "
                                 f"{tuple(cf.shape[:2])}, got {tuple(ca.shape)}")

    def __len__(self) -> int:
        return self.frames.shape[0]

    @property
    def has_context(self) -> bool:
        return self.context_frames is not None

    def resized(self, height: int, width: int) -> InitialStates:
        """Bilinear resize (as the reference env) when the stored size differs."""
        if tuple(self.frames.shape[1:3]) == (height, width):
            return self

        def rs(x: torch.Tensor) -> torch.Tensor:
            lead = x.shape[:-3]
            y = x.reshape(-1, *x.shape[-3:]).permute(0, 3, 1, 2).float()
            y = F.interpolate(y, size=(height, width), mode="bilinear", align_corners=False)
            y = y.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
            return y.reshape(*lead, height, width, 3).contiguous()

        return InitialStates(
            rs(self.frames), self.tasks, self.task_ids,
            None if self.context_frames is None else rs(self.context_frames),
            self.context_actions,
        )


def write_initial_states(
    path: str | os.PathLike,
    frames,
    tasks: list[str],
    context_frames=None,
    context_actions=None,
) -> Path:
    """Write the directory format above (each file atomically). Arrays may be numpy or torch."""
    t = lambda x: None if x is None else torch.as_tensor(np.asarray(x))  # noqa: E731
    uniq = list(dict.fromkeys(tasks))
    states = InitialStates(
        t(frames), list(tasks), torch.tensor([uniq.index(s) for s in tasks], dtype=torch.int64),
        t(context_frames), None if context_actions is None else t(context_actions).float(),
    )
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    tensors = {"frames": states.frames.contiguous(), "task_ids": states.task_ids}
    if states.has_context:
        tensors["context_frames"] = states.context_frames.contiguous()
        tensors["context_actions"] = states.context_actions.contiguous()
    with atomic_path(root / TENSORS) as tmp:
        save_file(tensors, tmp)
    body = json.dumps({"format": FORMAT, "tasks": states.tasks}, indent=1)
    write_text(root / TASKS, body)
    return root


def load_initial_states(path: str | os.PathLike) -> InitialStates:
    root = Path(path)
    if not (root / TENSORS).is_file() or not (root / TASKS).is_file():
        raise FileNotFoundError(
            f"initial_states={str(root)!r} must be a directory with {TENSORS} and {TASKS} "
            "(write one with wmrl.envs.initial_states.write_initial_states)"
        )
    meta = json.loads((root / TASKS).read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{root / TASKS}: format must be {FORMAT!r}, got {meta.get('format')!r}")
    tensors = load_file(str(root / TENSORS))
    return InitialStates(
        tensors["frames"], list(meta["tasks"]), tensors["task_ids"],
        tensors.get("context_frames"), tensors.get("context_actions"),
    )


def synthetic_initial_states(
    num_states: int, height: int, width: int, num_tasks: int = 2, seed: int = 0,
    context: bool = True, action_dim: int = 7,
) -> InitialStates:
    """Smooth colour-gradient scenes for tiny CPU runs with random-weight models (no data)."""
    g = torch.Generator().manual_seed(seed)
    yy = torch.linspace(0, 1, height).view(1, height, 1, 1)
    xx = torch.linspace(0, 1, width).view(1, 1, width, 1)

    def scene(n: int) -> torch.Tensor:
        a, b, c = (torch.rand(n, 1, 1, 3, generator=g) for _ in range(3))
        return ((a + b * yy + c * xx) * 127.5).clamp(0, 255).to(torch.uint8)

    frames = scene(num_states)
    tasks = [f"task {i % num_tasks}" for i in range(num_states)]
    cf = ca = None
    if context:
        cf = scene(num_states * 4).reshape(num_states, 4, height, width, 3)
        ca = torch.rand(num_states, 4, action_dim, generator=g) * 2 - 1
    uniq = list(dict.fromkeys(tasks))
    ids = torch.tensor([uniq.index(s) for s in tasks], dtype=torch.int64)
    return InitialStates(frames, tasks, ids, cf, ca)


def build_initial_states(spec, height: int, width: int) -> InitialStates:
    """``spec``: an InitialStates, a directory path, or a dict {synthetic: {num_states, ...}}."""
    if isinstance(spec, InitialStates):
        states = spec
    elif isinstance(spec, (str, os.PathLike)):
        states = load_initial_states(spec)
    elif isinstance(spec, dict) or hasattr(spec, "keys"):
        spec = dict(spec)
        if "synthetic" not in spec:
            raise ValueError("initial_states dict must be {synthetic: {num_states: N, ...}}")
        states = synthetic_initial_states(height=height, width=width, **dict(spec["synthetic"]))
    else:
        raise TypeError(f"initial_states must be a path, a dict or InitialStates, got {type(spec)}")
    return states.resized(height, width)
