"""One optimizer update, the step every trainer in ``wmrl/finetune/`` takes: with or without a
Lightning Trainer (the world-model trainer's ``WorldModelFinetune.step``, the reward's
fine-tune on imagination)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def optimizer_step(optimizer, loss: torch.Tensor, params: Iterable[torch.Tensor],
                   grad_clip: float | None, schedule=None,
                   backward: Callable[[torch.Tensor], None] | None = None) -> float:
    """Zero the gradients, ``backward(loss)`` (default ``loss.backward()``; under a Trainer
    its ``manual_backward``), scale the gradients of ``params`` so their global norm is at
    most ``grad_clip`` (g <- g * min(1, c / ||g||_2); None: no clipping), step ``optimizer``,
    then ``schedule`` (the lr of the next step). Returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    (backward or torch.Tensor.backward)(loss)
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(list(params), grad_clip)
    optimizer.step()
    if schedule is not None:
        schedule.step()
    return loss.item()
