"""The world model's input layout: which frames and actions one chunk step feeds the model.

``WanWorldModelEnv.chunk_step`` builds its model input this way and the world-model trainer
builds its training clips this way (``build_clip``), so the model is trained on the
distribution it is run on. For a chunk that starts after ``s`` executed actions (``s`` a
multiple of ``CHUNK``, counted from the episode start):

    frames  [13] = [f_0 ; f_{s-3}, f_{s-2}, f_{s-1}, f_s ; f_{s+1} .. f_{s+8}]
    actions [13] = [r ; a_{s-4}, a_{s-3}, a_{s-2}, a_{s-1} ; a_s .. a_{s+7}]

f_t is the observation after t actions (f_0 the initial image, the env's fixed anchor), a_t
the action taken in f_t, so every frame is paired with the action that produced it; r =
(0, .., 0, ``OPEN_GRIPPER``) is the reset action. At s = 0 the 4 condition frames are copies
of f_0 with reset actions, as after ``env.reset()`` (no KIR). A chunk that runs past the end of
an episode repeats the last frame with the hold action (zero motion, last gripper command).
NumPy and torch only.
"""

from __future__ import annotations

import numpy as np
import torch

CONDITION_FRAMES = 5  # the anchor + the last 4 frames
CHUNK = 8  # new frames (= actions) per chunk step
OPEN_GRIPPER = -1.0  # the gripper action of the condition slots after a reset (RLinf's
                     # reset_gripper_open); an imported reset state without KIR context too
RESET_ACTION = np.array([0, 0, 0, 0, 0, 0, OPEN_GRIPPER], dtype=np.float32)


def reset_actions(n: int, condition_frames: int = CONDITION_FRAMES, action_dim: int = 7,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """The condition actions after a reset, float32 [n, condition_frames, action_dim]: zero
    motion, the gripper (the last value) open."""
    a = torch.zeros(n, condition_frames, action_dim, device=device)
    a[..., -1] = OPEN_GRIPPER
    return a


def hold_action(actions: np.ndarray) -> np.ndarray:
    """The action past an episode's end (``actions`` [T, 7]): zero motion, the last gripper
    command (the reset action for an empty episode)."""
    hold = RESET_ACTION.copy()
    if len(actions):
        hold[6] = actions[-1, 6]
    return hold


def build_clip(frames: np.ndarray, actions: np.ndarray, start: int,
               condition_frames: int = CONDITION_FRAMES,
               chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """One clip (see the module docstring) of an episode (frames [T + 1, H, W, 3], actions
    [T, 7]): (uint8 [cf + chunk, H, W, 3], float32 [cf + chunk, 7]) for the chunk starting
    after ``start`` actions."""
    t_len = actions.shape[0]
    if frames.shape[0] != t_len + 1:
        raise ValueError(f"episode needs T+1 frames for T actions, got {frames.shape[0]} "
                         f"frames and {t_len} actions")
    if not 0 <= start < max(t_len, 1):
        raise ValueError(f"chunk start {start} outside the episode (T={t_len})")
    k = condition_frames - 1
    f_idx, acts = [0], [RESET_ACTION]
    for j in range(k):
        f = start - k + 1 + j
        f_idx.append(max(f, 0))
        acts.append(actions[f - 1] if f >= 1 else RESET_ACTION)
    hold = hold_action(actions)
    for i in range(chunk):
        t = start + i
        f_idx.append(min(t + 1, t_len))
        acts.append(actions[t] if t < t_len else hold)
    return frames[f_idx], np.stack(acts).astype(np.float32)


def chunk_actions(actions: np.ndarray, c: int, chunk: int = CHUNK) -> np.ndarray:
    """Actions of chunk ``c`` of an episode (``actions`` [T, 7]), float32 [chunk, 7], padded
    past its end with the hold action: what an env is fed to replay the episode."""
    a = actions[c * chunk : (c + 1) * chunk]
    pad = np.tile(hold_action(actions), (chunk - len(a), 1))
    return np.concatenate([a, pad]).astype(np.float32)
