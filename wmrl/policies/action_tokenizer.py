"""OpenVLA's discrete action tokens: bins, logit masking, sampling, de-tokenisation.

Conventions (openvla / openvla-oft / RLinf, checked against their sources):
* ``n_bins`` (256) action tokens are the last ``n_bins`` ids of the *base* vocabulary
  (``vocab_base`` = 32000 for Llama-2; the embedding is padded above it, e.g. to 32064).
* token id -> bin index ``b = vocab_base - 1 - id`` in [0, n_bins)  (OpenVLA's "discretized"
  value ``vocab_base - id`` minus one), so the logit of bin b is ``logits[..., vocab_base-1-b]``.
* ``bins = linspace(-1, 1, n_bins)`` are edges; the ``n_bins - 1`` centres are
  ``(bins[:-1] + bins[1:]) / 2``; bin b decodes to centre ``min(b, n_bins - 2)``.
* un-normalisation (BOUNDS_Q99): ``a = 0.5 (x + 1) (q99 - q01 + 1e-8) + q01`` where
  ``mask`` is true, ``a = x`` elsewhere (OpenVLA leaves the gripper un-normalised).
* LIBERO gripper (RLinf ``prepare_actions_for_libero``, OFT ``process_action``):
  ``g_env = -sign(2 g - 1)``: [0 = close, 1 = open] -> [+1 = close, -1 = open].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GRIPPER_MODES = ("libero", "none")


def bin_logits(logits: torch.Tensor, vocab_base: int, n_bins: int,
               first_id: int = 0) -> torch.Tensor:
    """Logits over token ids ``first_id, first_id + 1, ...`` [..., V] -> logits over the action
    bins [..., n_bins], bin-ordered (bin i = id ``vocab_base - 1 - i``).

    Restricting to these columns is the same as setting every other id to -inf. ``first_id``
    lets a caller compute only the action ids' logits (``first_id = vocab_base - n_bins``)."""
    lo, hi = vocab_base - n_bins - first_id, vocab_base - first_id
    if lo < 0 or logits.shape[-1] < hi:
        raise ValueError(f"logits of ids [{first_id}, {first_id + logits.shape[-1]}) do not "
                         f"cover the action ids [{vocab_base - n_bins}, {vocab_base})")
    return logits[..., lo:hi].flip(-1)


def process_logits(logits: torch.Tensor, temperature: float, top_k: int = 0) -> torch.Tensor:
    """logits / T, then keep the top-k (ties kept), others -inf. Returns log-probs (log-softmax)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    x = logits.float() / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return F.log_softmax(x, dim=-1)


def entropy_from_logprobs(logp: torch.Tensor) -> torch.Tensor:
    """H = -sum p log p, with 0 log 0 = 0 for masked entries."""
    p = logp.exp()
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


def bin_centers(n_bins: int, device=None, dtype=torch.float32) -> torch.Tensor:
    edges = torch.linspace(-1, 1, n_bins, dtype=torch.float64)
    return ((edges[:-1] + edges[1:]) / 2).to(device=device, dtype=dtype)


def bins_to_normalized(bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    centers = bin_centers(n_bins, device=bins.device)
    return centers[bins.clamp(0, n_bins - 2)]


def unnormalize(
    x: torch.Tensor, q01: torch.Tensor, q99: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """[-1, 1] -> env units on the masked dims (BOUNDS_Q99)."""
    a = 0.5 * (x + 1) * (q99 - q01 + 1e-8) + q01
    return torch.where(mask, a, x)


def map_gripper(actions: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "none":
        return actions
    if mode != "libero":
        raise ValueError(f"gripper mode {mode!r} unknown; use one of {GRIPPER_MODES}")
    g = -torch.sign(2 * actions[..., -1:] - 1)
    return torch.cat([actions[..., :-1], g], dim=-1)


class ActionStats:
    """q01/q99/mask for one ``unnorm_key`` of ``dataset_statistics.json`` / config ``norm_stats``."""

    def __init__(self, norm_stats: dict, unnorm_key: str | None, action_dim: int):
        if not norm_stats:
            raise ValueError(
                "no action statistics: put dataset_statistics.json in the checkpoint directory "
                "or give config['norm_stats']"
            )
        key = unnorm_key
        if key is None:
            if len(norm_stats) != 1:
                raise KeyError(
                    f"unnorm_key is required: the statistics hold several datasets {sorted(norm_stats)}"
                )
            key = next(iter(norm_stats))
        if key not in norm_stats and f"{key}_no_noops" in norm_stats:
            key = f"{key}_no_noops"  # RLinf's fallback
        if key not in norm_stats:
            raise KeyError(f"unnorm_key {unnorm_key!r} not in dataset statistics; available: "
                           f"{sorted(norm_stats)}")
        stats = norm_stats[key]["action"]
        self.key = key
        self.q01 = torch.tensor(stats["q01"], dtype=torch.float32, device="cpu")
        self.q99 = torch.tensor(stats["q99"], dtype=torch.float32, device="cpu")
        self.mask = torch.tensor(stats.get("mask", [True] * len(stats["q01"])), dtype=torch.bool,
                                 device="cpu")
        if self.q01.numel() != action_dim:
            raise ValueError(f"statistics {key!r} have {self.q01.numel()} action dims, the policy "
                             f"has action_dim {action_dim}")

    def decode(self, bins: torch.Tensor, n_bins: int, gripper: str) -> torch.Tensor:
        """bin indices [..., D] -> env actions [..., D] (float32)."""
        x = bins_to_normalized(bins, n_bins)
        dev = x.device
        a = unnormalize(x, self.q01.to(dev), self.q99.to(dev), self.mask.to(dev))
        return map_gripper(a, gripper)
