"""Learning-rate schedules as a factor of the base lr: one function for GRPO
(``algorithm.lr_schedule``), the SFT policy and the world model's training."""

from __future__ import annotations

import math

LR_SCHEDULES = ("constant", "cosine")


def lr_multiplier(step: int, total: int, schedule: str = "constant", warmup_steps: int = 0,
                  min_ratio: float = 0.0) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total``, as a factor of lr::

        warm-up (step < W)   (step + 1) / W
        constant             1
        cosine               m + (1 - m) (1 + cos(pi (step - W) / (total - W))) / 2

    m = ``min_ratio``. Cosine starts at 1 and is m after the last step (``total``): late
    steps, taken where the policy is furthest from the rollouts the world model learned
    from, move it least."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
    span = max(total - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
