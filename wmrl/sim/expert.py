"""Scripted expert for the tabletop tasks, with knobs that dial its success rate down.

The expert is a closed-loop, state-machine-free controller: every step it reads the
privileged ``obs["state"]`` (see ``tabletop.STATE_SLICES``) and decides the phase from it
(reach above the block, descend, close, carry, lower, release; or line up behind the block
and push), so it retries after a drop without extra bookkeeping. Motion commands are
proportional: a = clip(gain * (target - pos) / max_pos_step, -1, 1).

Noise knobs (all per env, seeded):
  noise_std        Gaussian std added to the 6 motion dims (then clipped to [-1, 1]).
  hesitate_prob    per-step probability to start a pause of 1..hesitate_max steps, during
                   which the motion dims are 0 (the gripper command is kept). Pauses cost
                   time, so episodes run out of steps.
  gripper_flip_prob per-step probability to send the opposite gripper command (drops the
                   block or closes early).
  speed_range      [lo, hi]: per-episode top speed drawn uniformly (fraction of the full
                   command; motion commands are clipped to +-speed): demonstrators who work
                   at different paces, as human teleoperators do. A policy cloned from them
                   moves at their mixed pace and often runs out of time.
"""

from __future__ import annotations

import numpy as np

from wmrl.sim.tabletop import (
    BLOCK_HALF,
    BLOCKS,
    FINGER_HALF_THICK,
    PLATE_TOP,
    PUSH_SUCCESS_X,
    STATE_SLICES,
    success_from_state,
    task_by_name,
)

APPROACH_Z = 0.11  # grasp-point height for travelling above the blocks
CARRY_Z = 0.12
PLACE_Z = PLATE_TOP + BLOCK_HALF + 0.012  # release height of the block centre
PUSH_Z = 0.03  # grasp-point height while pushing (fingertips 1 cm above the table)
PUSH_CONTACT = BLOCK_HALF + FINGER_HALF_THICK * 2  # hand x offset when touching the block
PUSH_GOAL_X = PUSH_SUCCESS_X - 0.04


def _field(state: np.ndarray, name: str) -> np.ndarray:
    return state[STATE_SLICES[name]].astype(np.float64)


def _move(pos: np.ndarray, target: np.ndarray, max_pos_step: float, gain: float) -> np.ndarray:
    return np.clip(gain * (target - pos) / max_pos_step, -1.0, 1.0)


def place_action(state: np.ndarray, block: str, max_pos_step: float, gain: float) -> np.ndarray:
    """Pick ``block`` and put it on the plate."""
    hand = _field(state, "hand_pos")
    held = int(round(state[STATE_SLICES["held"]][0]))
    blk = _field(state, f"{block}_pos")
    plate = _field(state, "plate_pos")
    a = np.zeros(7)
    if held >= 0 and BLOCKS[held] != block:  # holding the wrong block: drop it
        a[6] = -1.0
        a[2] = 1.0
        return a
    if held >= 0:
        d_xy = np.linalg.norm(plate[:2] - hand[:2])
        if d_xy > 0.02:
            target = np.array([*plate[:2], CARRY_Z])
            if hand[2] < CARRY_Z - 0.04 and d_xy > 0.04:  # lift before travelling
                target[:2] = hand[:2]
            a[6] = 1.0
        else:  # lower while still centring over the plate, release near the surface
            target = np.array([*plate[:2], PLACE_Z])
            a[6] = -1.0 if hand[2] < PLACE_Z + 0.01 else 1.0
        a[:3] = _move(hand, target, max_pos_step, gain)
        return a
    if success_from_state(state, f"{block}_on_plate"):  # done: back off, open
        a[:3] = _move(hand, np.array([*hand[:2], 0.16]), max_pos_step, gain)
        a[6] = -1.0
        return a
    d_xy = np.linalg.norm(blk[:2] - hand[:2])
    if d_xy > 0.015:
        target = np.array([*blk[:2], APPROACH_Z])
        if hand[2] < APPROACH_Z - 0.04 and d_xy > 0.03:  # rise before travelling
            target[:2] = hand[:2]
        a[6] = -1.0
    else:  # descend while centring; close once the block is inside the capture box
        target = np.array([*blk[:2], blk[2]])
        a[6] = 1.0 if abs(hand[2] - blk[2]) < 0.01 else -1.0
    a[:3] = _move(hand, target, max_pos_step, gain)
    return a


def push_action(state: np.ndarray, block: str, max_pos_step: float, gain: float) -> np.ndarray:
    """Push ``block`` in -x into the left zone with the closed fingers as a paddle."""
    hand = _field(state, "hand_pos")
    held = int(round(state[STATE_SLICES["held"]][0]))
    blk = _field(state, f"{block}_pos")
    a = np.zeros(7)
    if held >= 0:  # never carry in the push task
        a[6] = -1.0
        a[2] = 1.0
        return a
    a[6] = 1.0
    if blk[0] < PUSH_SUCCESS_X - 0.01 and abs(blk[2] - BLOCK_HALF) < 0.01:  # done: back off
        a[:3] = _move(hand, np.array([*hand[:2], 0.16]), max_pos_step, gain)
        return a
    pre = np.array([blk[0] + PUSH_CONTACT + 0.025, blk[1], PUSH_Z])
    aligned = abs(hand[1] - blk[1]) < 0.02
    behind = hand[0] > blk[0] + PUSH_CONTACT - 0.01
    if aligned and behind and hand[2] < PUSH_Z + 0.02:  # in contact lane: push, re-centre y
        target = np.array([PUSH_GOAL_X + PUSH_CONTACT, blk[1], PUSH_Z])
    elif np.linalg.norm(hand[:2] - pre[:2]) < 0.015:
        target = pre  # lined up: descend
    else:
        target = np.array([pre[0], pre[1], APPROACH_Z])
        if hand[2] < APPROACH_Z - 0.04:  # rise before travelling
            target[:2] = hand[:2]
    a[:3] = _move(hand, target, max_pos_step, gain)
    return a


class ScriptedExpert:
    """Batched scripted expert: ``act(obs) -> actions [B, 7]``; ``__call__(obs)`` returns
    ``[B, 1, 7]`` so it plugs into ``scripts/collect.py`` as a chunk-1 action source."""

    def __init__(
        self,
        noise_std: float = 0.0,
        hesitate_prob: float = 0.0,
        hesitate_max: int = 8,
        gripper_flip_prob: float = 0.0,
        speed_range: tuple[float, float] = (1.0, 1.0),
        max_pos_step: float = 0.02,
        gain: float = 1.0,
        seed: int = 0,
    ):
        for key, v in (("noise_std", noise_std), ("hesitate_prob", hesitate_prob),
                       ("gripper_flip_prob", gripper_flip_prob)):
            if v < 0:
                raise ValueError(f"expert.{key} must be >= 0, got {v}")
        lo, hi = (float(v) for v in speed_range)
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"expert.speed_range must satisfy 0 < lo <= hi <= 1, got {speed_range}")
        self.speed_range = (lo, hi)
        self.noise_std = noise_std
        self.hesitate_prob = hesitate_prob
        self.hesitate_max = hesitate_max
        self.gripper_flip_prob = gripper_flip_prob
        self.max_pos_step = max_pos_step
        self.gain = gain
        self.rng = np.random.default_rng(seed)
        self._pause = np.zeros(0, dtype=np.int64)
        self._last_grip = np.zeros(0)
        self._speed = np.ones(0)

    def reset(self, batch_size: int, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._pause = np.zeros(batch_size, dtype=np.int64)
        self._last_grip = -np.ones(batch_size)
        self._speed = self.rng.uniform(*self.speed_range, size=batch_size)

    def clean_action(self, state: np.ndarray, task: str) -> np.ndarray:
        t = task_by_name(task)
        fn = place_action if t.kind == "place" else push_action
        return fn(np.asarray(state), t.block, self.max_pos_step, self.gain)

    def act(self, obs: dict) -> np.ndarray:
        states = np.asarray(obs["state"])
        if states.ndim == 1:
            states, tasks = states[None], [obs["task"]]
        else:
            tasks = list(obs["task"])
        b = states.shape[0]
        if self._pause.shape[0] != b:
            self.reset(b)
        actions = np.stack([self.clean_action(s, t) for s, t in zip(states, tasks)])
        actions[:, :6] = np.clip(actions[:, :6], -self._speed[:, None], self._speed[:, None])
        if self.noise_std > 0:
            actions[:, :6] += self.rng.normal(0.0, self.noise_std, size=(b, 6))
        if self.gripper_flip_prob > 0:
            flip = self.rng.random(b) < self.gripper_flip_prob
            actions[flip, 6] *= -1.0
        if self.hesitate_prob > 0:
            start = (self._pause == 0) & (self.rng.random(b) < self.hesitate_prob)
            self._pause[start] = self.rng.integers(1, self.hesitate_max + 1, size=start.sum())
            paused = self._pause > 0
            actions[paused, :6] = 0.0
            actions[paused, 6] = self._last_grip[paused]
            self._pause[paused] -= 1
        self._last_grip = actions[:, 6].copy()
        return np.clip(actions, -1.0, 1.0).astype(np.float32)

    def __call__(self, obs: dict) -> np.ndarray:
        return self.act(obs)[:, None, :]
