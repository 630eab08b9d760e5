"""Reward shaping: a reward model's per-frame scores -> the env's rewards and success.

For one chunk of C frames with scores s_t in [0, 1] (t = 0..C-1), success threshold tau and
coefficient k (``reward_coef``)::

    success = max_t s_t >= tau     (terminates the episode on the chunk's last frame)
    r_t     = k s_t - k s_{t-1}    (use_rel_reward; RLinf ``_calc_step_reward``)
    r_t     = 1[s_t >= tau]        (otherwise: the binary per-frame success, as RLinf's 0/1
                                    reward-model output)

In the relative reward, k s_{-1} is the previous chunk's last scaled score (0 after reset),
carried by the caller, so an episode's return telescopes to k * (its last score).

``resample_shift``: with a second draw s' of an episode's last chunk (the env's
``resample_return``), the last frame's reward moves by k (read - s_{C-1}) with
read = min(s_{C-1}, s'_{C-1}) or their mean, so the return becomes k * read.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class ShapedChunk(NamedTuple):
    rewards: torch.Tensor  # float [B, C]
    success: torch.Tensor  # bool [B]: max_t s_t >= tau
    last_scaled: torch.Tensor  # float [B]: k s_{C-1}, the next chunk's k s_{-1} (rel reward)


# how the resample check reads a deciding frame's two scores (env.resample_return)
RESAMPLE_RETURNS = ("min", "mean")


def shape_rewards(scores: torch.Tensor, prev_scaled: torch.Tensor, success_threshold: float,
                  use_rel_reward: bool, reward_coef: float) -> ShapedChunk:
    """Rewards [B, C] and success [B] of one chunk's ``scores`` [B, C]; ``prev_scaled`` [B] is
    k s_{-1}, returned unchanged as ``last_scaled`` by the binary reward (see module doc)."""
    if use_rel_reward:
        scaled = reward_coef * scores
        prev = torch.cat([prev_scaled[:, None], scaled[:, :-1]], 1)
        rewards, last_scaled = scaled - prev, scaled[:, -1]
    else:
        rewards, last_scaled = (scores >= success_threshold).float(), prev_scaled
    return ShapedChunk(rewards, chunk_success(scores, success_threshold), last_scaled)


def chunk_success(scores: torch.Tensor, success_threshold: float) -> torch.Tensor:
    """bool [B]: max_t s_t >= tau over a chunk's scores [B, C]."""
    return scores.max(1).values >= success_threshold


def resample_shift(first: torch.Tensor, second: torch.Tensor, read: str,
                   reward_coef: float) -> torch.Tensor:
    """k (read - first) [B]: what to add to the last reward of ending episodes whose last
    frame scored ``first`` in the main draw and ``second`` in the resample (``read``: min |
    mean)."""
    both = torch.minimum(first, second) if read == "min" else (first + second) / 2
    return reward_coef * (both - first)
