r"""GRPO for chunked action-token policies, as pure torch functions (no Lightning, no Ray).

Notation: N trajectories, T env steps each (T = K chunks x C steps), L tokens per row.
Rollouts come in groups: ``group_size`` consecutive trajectories share one initial state.

Returns and masks (``trajectory_returns``)::

    d_i   = first t with done[i, t]            (T - 1 if never done)
    R_i   = sum_{t <= d_i} r[i, t]
    m[i,t] = 1[t <= d_i]

Group-normalised advantages (``group_advantages``), g = the group of i::

    A_i = (R_i - mean_g R) / (std_g R + eps)     scale="group" (GRPO, unbiased std)
    A_i =  R_i - mean_g R                        scale="none"  (Dr.GRPO)

Groups kept for the update (the rest give no gradient): ``informative_groups`` drops groups
whose successes are all 0 or all 1; ``return_filtered_groups`` keeps groups whose mean return
lies in [low, high] (RLinf's return filter).

Episodes the world model cannot repeat (``unrepeatable_episodes``): with the env's resample
check, each episode's deciding chunk is imagined twice from independent noise; an episode
whose two verdicts disagree (success_i != resampled_i) won or lost by the world model's draw,
not by its actions. Left out (``valid`` = False), it gives no gradient and no statistics: its
group's mean and std are taken over the valid rows V_g (|V_g| >= 2, else the group is flat)::

    A_i = (R_i - mean_{V_g} R) / (std_{V_g} R + eps)   for i in V_g;  A_i = 0 otherwise

Clipped surrogate per token (``policy_loss``), rho = exp(logp - logp_old)::

    l_t = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))
    dual clip c (A < 0 only):  l_t = min(l_t, c |A|)

KL to a frozen reference policy (``kl_coef`` beta > 0; DeepSeekMath's GRPO penalty, the
unbiased, non-negative k3 estimator of KL(pi || pi_ref) per sampled token)::

    l_t += beta (exp(logp_ref - logp) - (logp_ref - logp) - 1)

Aggregation over valid tokens (L_i = number of valid tokens of row i)::

    traj-mean           (1/N) sum_i (1/L_i) sum_t m l      (WoVR Eq. 11: 1/T_valid per trajectory)
    token-mean          sum_{i,t} m l / sum_{i,t} m
    seq-mean-token-sum  (1/N) sum_i sum_t m l

Rows with no valid token contribute zero (never NaN). Every aggregation is a weighted sum
``sum w[i,t] l[i,t]``; ``aggregation_weights`` returns those weights so a caller that splits a
batch into micro-batches can sum micro-batch losses and get exactly the full-batch loss.

Across data-parallel ranks (``aggregation_weights(..., rows=, tokens=)``): split the batch
into rank batches B_1 ... B_R and let N = sum_r N_r (kept rows) and M = sum_r M_r (valid
tokens) be the normalisers summed over ranks. Rank r's weights computed with N and M in
place of its own counts are exactly the union batch's weights restricted to B_r, so
sum_r loss_r = the union's loss. A strategy that averages gradients over ranks (DDP, FSDP2)
divides that sum by R, so the caller multiplies the weights by R (not done here: this
module knows nothing of ranks).
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("traj-mean", "token-mean", "seq-mean-token-sum")
ADVANTAGE_SCALES = ("group", "none")  # GRPO | Dr.GRPO


def first_done_mask(dones: torch.Tensor) -> torch.Tensor:
    """Bool [N, T]: steps up to and including the first done (all steps if never done)."""
    done = dones.bool()
    # number of dones strictly before t; a step is valid while none has happened yet
    before = torch.cumsum(done.int(), dim=1) - done.int()
    return before == 0


def trajectory_returns(
    rewards: torch.Tensor, dones: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards, dones [N, T] -> (returns [N], loss_mask [N, T] bool)."""
    if rewards.shape != dones.shape or rewards.dim() != 2:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and dones {tuple(dones.shape)} must both be [N, T]"
        )
    mask = first_done_mask(dones)
    returns = (rewards * mask.to(rewards.dtype)).sum(dim=1)
    return returns, mask


def groups(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """x [N] -> [N / group_size, group_size] (consecutive rows share an initial state)."""
    if group_size < 1 or x.shape[0] % group_size != 0:
        raise ValueError(
            f"{x.shape[0]} trajectories do not split into groups of group_size={group_size}"
        )
    return x.view(-1, group_size)


def group_advantages(
    returns: torch.Tensor, group_size: int, eps: float = 1e-6, scale: str = "group",
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """returns [N] -> advantages [N], normalised within consecutive groups of ``group_size``;
    ``valid`` [N] bool: only those rows make their group's statistics, the others get 0."""
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be 'group' or 'none', got {scale!r}")
    g = groups(returns.float(), group_size)
    if valid is not None:
        return _valid_group_advantages(g, groups(valid.bool(), group_size), eps, scale)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale == "group":
        std = g.std(dim=1, unbiased=True, keepdim=True) if group_size > 1 else torch.zeros_like(g)
        centred = centred / (std + eps)
    return centred.reshape(-1)


def _valid_group_advantages(g: torch.Tensor, v: torch.Tensor, eps: float,
                            scale: str) -> torch.Tensor:
    """``group_advantages`` over the valid rows ``v`` [groups, group_size] of each group."""
    w = v.float()
    n = w.sum(dim=1, keepdim=True)
    mean = (g * w).sum(dim=1, keepdim=True) / n.clamp(min=1)
    centred = (g - mean) * w
    if scale == "group":
        var = (centred ** 2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)
        std = torch.where(n > 1, var.sqrt(), torch.zeros_like(var))
        centred = centred / (std + eps)
    return centred.reshape(-1)


def unrepeatable_episodes(success: torch.Tensor, resample_success: torch.Tensor) -> torch.Tensor:
    """success, resample_success [N] (the env's two imagined verdicts on each episode's
    deciding chunk) -> [N] bool: True where they disagree."""
    return success.bool() != resample_success.bool()


def informative_groups(success: torch.Tensor, group_size: int,
                       valid: torch.Tensor | None = None) -> torch.Tensor:
    """success [N] (binary) -> keep [N] bool: False for rows of groups that all failed or all
    succeeded (zero advantage variance, no gradient); with ``valid`` [N] bool, judged on the
    valid rows only."""
    g = groups(success.float(), group_size)
    if valid is None:
        rate = g.mean(dim=1, keepdim=True)
    else:
        w = groups(valid.bool(), group_size).float()
        rate = (g * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp(min=1)
    keep = (rate > 0) & (rate < 1)
    return keep.expand_as(g).reshape(-1)


def return_filtered_groups(returns: torch.Tensor, group_size: int, low: float,
                           high: float) -> torch.Tensor:
    """returns [N] -> keep [N] bool: rows of groups whose mean return lies in [low, high]
    (inclusive; RLinf's ``filter_rewards`` with ``rewards_lower/upper_bound``: with returns of
    0 or 5 per trajectory and groups of 8, [0.5, 4.5] keeps groups with 1-7 successes)."""
    mean = groups(returns.float(), group_size).mean(dim=1, keepdim=True)
    keep = (mean >= low) & (mean <= high)
    return keep.expand(-1, group_size).reshape(-1)


def aggregation_weights(
    mask: torch.Tensor,
    aggregation: str = "traj-mean",
    rows: float | None = None,
    tokens: float | None = None,
) -> torch.Tensor:
    """mask [N, L] -> weights [N, L] so that loss = sum(weights * per_token_loss).

    ``rows`` / ``tokens`` replace the normalisers N (rows of ``mask``, used by traj-mean and
    seq-mean-token-sum) and sum(mask) (token-mean) - e.g. their sums over all data-parallel
    ranks, so each rank's weights are its slice of the union batch's weights::

        traj-mean           w[i,t] = m[i,t] / L_i / rows
        token-mean          w[i,t] = m[i,t] / tokens
        seq-mean-token-sum  w[i,t] = m[i,t] / rows

    (each normaliser clamped to >= 1). None (the default) = this batch's own count."""
    m = mask.float()
    n_rows = max(m.shape[0], 1) if rows is None else max(float(rows), 1.0)
    if aggregation == "traj-mean":
        per_row = m.sum(dim=1, keepdim=True)
        return m / per_row.clamp(min=1.0) / n_rows
    if aggregation == "token-mean":
        if tokens is None:
            return m / m.sum().clamp(min=1.0)
        return m / max(float(tokens), 1.0)
    if aggregation == "seq-mean-token-sum":
        return m / n_rows
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    aggregation: str = "traj-mean",
    weights: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped GRPO surrogate. logprobs/old_logprobs/mask [N, L], advantages [N].

    ``weights`` [N, L] overrides the aggregation (use ``aggregation_weights`` on the full
    batch and pass slices of it for micro-batches). ``ref_logprobs`` [N, L] (the frozen
    reference policy's, no gradient) adds ``kl_coef`` x the k3 KL per token and the
    ``ref_kl`` metric. Returns (loss, metrics)."""
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"mask {tuple(mask.shape)} must have the same [N, L] shape"
        )
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (got {dual_clip})")
    if kl_coef and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (the reference policy's log-probs)")
    m = mask.bool()
    adv = advantages.to(logprobs.dtype).unsqueeze(1).expand_as(logprobs)
    log_ratio = torch.where(m, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        bounded = torch.minimum(per_token, dual_clip * adv.abs())
        per_token = torch.where(adv < 0, bounded, per_token)
    ref_kl = None
    if ref_logprobs is not None:
        ref_log_ratio = torch.where(m, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))
        ref_kl = torch.exp(ref_log_ratio) - ref_log_ratio - 1.0  # k3, >= 0, 0 where masked
        per_token = per_token + kl_coef * ref_kl
    if weights is None:
        weights = aggregation_weights(m, aggregation)
    loss = (weights.to(per_token.dtype) * torch.where(m, per_token, 0.0)).sum()

    with torch.no_grad():
        n = m.sum().clamp(min=1).float()

        def masked_mean(x: torch.Tensor) -> torch.Tensor:
            return torch.where(m, x, 0.0).sum() / n

        metrics = {
            "clip_fraction": masked_mean((clipped > unclipped).float()),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio),  # k3 estimator, >= 0
            "ratio_mean": masked_mean(ratio),
            "ratio_max": torch.where(m, ratio, 0.0).max() if m.any() else ratio.new_zeros(()),
        }
        if ref_kl is not None:
            metrics["ref_kl"] = masked_mean(ref_kl)
    return loss, metrics
