r"""The update of one rollout batch as named, pure stages (``GRPOModule.update`` runs them in
this order; no Lightning, no ranks: what crosses ranks is passed in).

1. ``score_episodes``: returns and step masks, the episodes left out (``drop_unrepeatable``),
   one advantage per episode from the configured estimator (``wmrl/algorithms/advantages.py``)
   and the keep-mask of the episodes that carry a gradient::

       keep_i = informative(g_i) [filter_groups] & low <= mean_g R <= high [return_filter]
                & valid_i

2. ``rollout_counts``: the batch's figures as (numerator, denominator) pairs, so ranks add up.
3. ``kept_tokens`` + ``flatten_samples``: the kept episodes' valid chunks as samples
   (episode, chunk, advantage, per-token weights); the caller computes the token weights
   (``grpo.aggregation_weights``, with the union's normalisers when there are several ranks).
4. ``pad_samples``: zero-weight copies of sample 0 up to the largest rank's sample count, so
   every rank runs the same micro-batches (FSDP's collectives).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wmrl.algorithms import grpo
from wmrl.algorithms.advantages import estimate_advantages


@dataclass
class ScoredEpisodes:
    """Stage 1's output for N episodes of K chunks."""

    returns: torch.Tensor  # [N] float
    step_mask: torch.Tensor  # [N, T] bool: steps up to the first done
    chunk_mask: torch.Tensor  # [N, K] bool: a chunk is valid if its first step is
    advantages: torch.Tensor  # [N]
    keep: torch.Tensor  # [N] bool: episodes that enter the update
    valid: torch.Tensor | None  # [N] bool: episodes the world model repeats (None: all)


@dataclass
class Samples:
    """One row per (kept episode, valid chunk) sample."""

    episode: torch.Tensor  # [S] long: the episode's row in the batch
    chunk: torch.Tensor  # [S] long
    advantages: torch.Tensor  # [S]
    weights: torch.Tensor  # [S, L]: the sample's tokens' share of the loss

    def __len__(self) -> int:
        return len(self.episode)


def score_episodes(rewards: torch.Tensor, dones: torch.Tensor, success: torch.Tensor,
                   chunks: int, group_size: int, estimator: str = "grpo",
                   advantage_scale: str = "group", filter_groups: bool = True,
                   return_filter: tuple[float, float] | None = None,
                   drop_unrepeatable: bool = False,
                   resample_success: torch.Tensor | None = None) -> ScoredEpisodes:
    """rewards, dones [N, T] (T = ``chunks`` x steps per chunk), success [N] -> stage 1.
    ``drop_unrepeatable`` leaves out the episodes whose two imagined verdicts disagree
    (``resample_success``, the env's second verdict; ``grpo.unrepeatable_episodes``)."""
    n = rewards.shape[0]
    returns, step_mask = grpo.trajectory_returns(rewards.float(), dones)
    chunk_mask = step_mask.view(n, chunks, -1)[:, :, 0]
    valid = None
    if drop_unrepeatable:
        if resample_success is None:
            raise ValueError("algorithm.drop_unrepeatable=true needs the env's second "
                             "verdict on each episode: set env.resample_check=true")
        valid = ~grpo.unrepeatable_episodes(success, resample_success)
    advantages = estimate_advantages(estimator, returns, group_size, valid=valid,
                                     scale=advantage_scale)
    keep = (grpo.informative_groups(success.float(), group_size, valid) if filter_groups
            else torch.ones(n, dtype=torch.bool))
    if return_filter is not None:
        keep &= grpo.return_filtered_groups(returns, group_size, *return_filter)
    if valid is not None:
        keep &= valid
    return ScoredEpisodes(returns, step_mask, chunk_mask, advantages, keep, valid)


def resample_counts(success: torch.Tensor, resampled: torch.Tensor
                    ) -> dict[str, tuple[float, float]]:
    """The world model's second opinion on a batch (``env.resample_check``), no simulator:

    * ``wm/resample_agreement`` = mean 1[success_i == resampled_i];
    * ``wm/fragile_success`` = P(resampled fails | imagined success): the share of the
      policy's imagined wins that the same last chunk, imagined again from other noise, does
      not repeat (0 when nothing succeeded);
    * ``wm/resample_success`` = mean resampled_i.
    """
    success, resampled = success.bool(), resampled.bool()
    n = float(len(success))
    return {
        "wm/resample_agreement": (float((success == resampled).sum()), n),
        "wm/fragile_success": (float((success & ~resampled).sum()), float(success.sum())),
        "wm/resample_success": (float(resampled.sum()), n),
    }


def rollout_counts(scored: ScoredEpisodes, success: torch.Tensor,
                   resample_success: torch.Tensor | None = None
                   ) -> dict[str, tuple[float, float]]:
    """Stage 2: ``rollout/*`` (and ``wm/*`` with the env's second verdict) as (numerator,
    denominator) per metric: summed over ranks, their ratios are the union batch's figures."""
    n = float(len(scored.returns))
    counts = {"rollout/return": (float(scored.returns.sum()), n),
              "rollout/success": (float(success.float().sum()), n),
              "rollout/episode_len": (float(scored.step_mask.sum()), n),
              "rollout/kept_groups": (float(scored.keep.sum()), n),
              "rollout/zero_var_groups": (float((~scored.keep).sum()), n)}
    if resample_success is not None:
        counts.update(resample_counts(success, resample_success))
    if scored.valid is not None:
        counts["rollout/dropped_unrepeatable"] = (float((~scored.valid).sum()), n)
    return counts


def ratios(counts: dict[str, tuple[float, float]]) -> dict[str, float]:
    """numerator / denominator per metric (0 for an empty denominator)."""
    return {k: num / den if den else 0.0 for k, (num, den) in counts.items()}


def kept_tokens(scored: ScoredEpisodes, tokens_per_chunk: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 3a: (the kept episodes' rows [N'], their token mask [N', K x L]): a token is
    valid when its chunk is."""
    rows = scored.keep.nonzero().squeeze(1)
    return rows, scored.chunk_mask[rows].repeat_interleave(tokens_per_chunk, dim=1)


def flatten_samples(scored: ScoredEpisodes, rows: torch.Tensor,
                    token_weights: torch.Tensor) -> Samples:
    """Stage 3b: the valid chunks of the kept episodes ``rows`` [N'] as samples, with their
    episode's advantage and their tokens' weights (``token_weights`` [N', K, L])."""
    traj, chunk = scored.chunk_mask[rows].nonzero(as_tuple=True)
    return Samples(rows[traj], chunk, scored.advantages[rows][traj],
                   token_weights[traj, chunk])


def pad_samples(samples: Samples, target: int) -> Samples:
    """Stage 4: ``samples`` padded to ``target`` with zero-weight copies of sample 0 of the
    batch (episode 0, chunk 0, advantage 0): they count in neither loss nor metrics."""
    pad = target - len(samples)
    if pad <= 0:
        return samples
    s = samples
    return Samples(torch.cat([s.episode, s.episode.new_zeros(pad)]),
                   torch.cat([s.chunk, s.chunk.new_zeros(pad)]),
                   torch.cat([s.advantages, s.advantages.new_zeros(pad)]),
                   torch.cat([s.weights, s.weights.new_zeros(pad, s.weights.shape[1])]))
