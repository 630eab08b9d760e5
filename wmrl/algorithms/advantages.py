r"""Advantage estimators, chosen by ``algorithm.adv_estimator`` (verl's key): each maps the
episodes' returns [N] (``group_size`` consecutive episodes share an initial state) to one
advantage per episode, 0 for the episodes left out (``valid`` [N] bool, False), whose returns
also stay out of their group's statistics. A new estimator is one function and one line in
``ESTIMATORS``.

``grpo`` (``wmrl.algorithms.grpo.group_advantages``, the math is there): the return minus the
group's mean, over the group's std (``advantage_scale=group``) or not (``none``, Dr.GRPO).

``rloo`` (REINFORCE leave-one-out; Kool et al. 2019, Ahmadian et al. 2024): the return minus
the mean of the *other* returns of its group, V_g the valid episodes of i's group::

    A_i = R_i - (1 / (|V_g| - 1)) sum_{j in V_g, j != i} R_j  =  (|V_g| R_i - S_g) / (|V_g| - 1)

with S_g = sum_{j in V_g} R_j; a group with fewer than two valid episodes gets 0. It is GRPO's
centred advantage times |V_g| / (|V_g| - 1) with no std: an unbiased baseline, unscaled.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from wmrl.algorithms.grpo import group_advantages, groups


def grpo_advantages(returns: torch.Tensor, group_size: int, valid: torch.Tensor | None = None,
                    scale: str = "group") -> torch.Tensor:
    """GRPO's group-normalised advantages (``scale``: ``group`` or ``none``)."""
    return group_advantages(returns, group_size, scale=scale, valid=valid)


def rloo_advantages(returns: torch.Tensor, group_size: int, valid: torch.Tensor | None = None,
                    scale: str = "group") -> torch.Tensor:
    """Leave-one-out baselines within each group (module docstring); ``scale`` is GRPO's and
    does not apply (RLOO is unscaled)."""
    g = groups(returns.float(), group_size)
    w = torch.ones_like(g) if valid is None else groups(valid.bool(), group_size).float()
    n = w.sum(dim=1, keepdim=True)
    total = (g * w).sum(dim=1, keepdim=True)
    adv = (n * g - total) / (n - 1).clamp(min=1) * w
    return torch.where(n > 1, adv, torch.zeros_like(adv)).reshape(-1)


Estimator = Callable[..., torch.Tensor]
ESTIMATORS: dict[str, Estimator] = {"grpo": grpo_advantages, "rloo": rloo_advantages}


def estimate_advantages(name: str, returns: torch.Tensor, group_size: int,
                        valid: torch.Tensor | None = None, scale: str = "group") -> torch.Tensor:
    """``ESTIMATORS[name]`` on ``returns`` [N]; a clear error for an unknown name."""
    if name not in ESTIMATORS:
        raise ValueError(f"algorithm.adv_estimator={name!r}: one of {sorted(ESTIMATORS)}")
    return ESTIMATORS[name](returns, group_size, valid=valid, scale=scale)
