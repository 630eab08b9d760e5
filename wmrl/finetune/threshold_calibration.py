"""The world model's success, read closed loop, against the simulator's (``scripts/calibrate_threshold.py``).

The env calls an imagined episode a success when the reward's score on an imagined frame
reaches ``env.success_threshold`` (h). The policy acts on imagined frames, so how often that
happens is a property of the whole loop (policy, world model, reward), not of the reward alone:
the open-loop replay check (``replay_agreement``) replays recorded actions instead. Here

    peak_i = max over the episode's imagined frames of p_t          (env never terminates)
    wm(h)  = mean_i 1[peak_i >= h]                                   (success is sticky, so
                                                                      this is what ending the
                                                                      episode at h would give)
    h*     = argmin over the grid of |wm(h) - sim|                  (sim: the simulator's
                                                                      success of the same policy
                                                                      on the same scenes; a tie
                                                                      goes to the higher h)

so one closed-loop run per policy reads every threshold. Run it on scenes that are neither the
training scenes nor the unseen evaluation scenes, so that choosing h never looks at either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999)


@torch.no_grad()
def imagined_peaks(env, policy, state_ids: Sequence[int], temperature: float = 1.0,
                   seed: int = 0) -> np.ndarray:
    """Each episode's peak reward score, float [len(state_ids)]: ``policy`` acts on the
    imagined frames of ``env`` (a ``WanWorldModelEnv`` with group size 1) from each of
    ``state_ids``, ``env.num_envs`` episodes at a time, for the env's whole episode length;
    the policy samples at ``temperature`` from a generator seeded with ``seed``."""
    if env.group_size != 1:
        raise ValueError(f"imagined_peaks needs an env with group_size 1, got {env.group_size}")
    env.success_threshold = float("inf")  # never terminate: every chunk is imagined and scored
    ids = [int(i) for i in state_ids]
    b = env.num_envs
    generator = torch.Generator().manual_seed(seed)
    peaks = []
    for start in range(0, len(ids), b):
        batch = ids[start : start + b]
        padded = batch + [batch[-1]] * (b - len(batch))  # a full env; the copies are dropped
        obs = env.reset(seed=seed + start, state_ids=padded)
        peak = torch.zeros(b)
        for _ in range(env.max_episode_steps // env.chunk):
            actions = policy.sample(obs, temperature, generator=generator).actions
            obs, _, _, truncs, info = env.chunk_step(actions.float())
            peak = torch.maximum(peak, info["scores"].amax(1).cpu())
            if bool(truncs[:, -1].all()):
                break
        peaks.append(peak[: len(batch)].numpy())
    return np.concatenate(peaks)


def success_by_threshold(peaks: np.ndarray, thresholds: Sequence[float] = THRESHOLDS
                         ) -> dict[str, float]:
    """The world model's success at each threshold: share of episodes whose peak reaches it."""
    return {str(h): float((np.asarray(peaks) >= h).mean()) for h in thresholds}


def rate_matching_threshold(peaks: np.ndarray, sim_success: float,
                            thresholds: Sequence[float] = THRESHOLDS) -> float:
    """The grid threshold at which the world model's success is closest to the simulator's
    (the higher one of a tie: the stricter reading)."""
    gap = {h: abs(float((np.asarray(peaks) >= h).mean()) - sim_success) for h in thresholds}
    return min(sorted(thresholds, reverse=True), key=lambda h: gap[h])
