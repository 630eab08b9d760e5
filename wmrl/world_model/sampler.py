"""Rectified-flow (flow-matching) schedule and Euler sampler used by the Wan world model.

Convention (Wan / DiffSynth ``FlowMatchScheduler``):

    x_sigma = (1 - sigma) * x0 + sigma * noise,        sigma in [0, 1]
    v       = d x_sigma / d sigma = noise - x0           (what the transformer predicts)
    shift:  sigma' = s * sigma / (1 + (s - 1) * sigma)   (spends more steps at high noise)
    timestep fed to the model = 1000 * sigma'

Inference uses ``num_steps`` sigmas from linspace(1, 0, num_steps + 1)[:-1] (shifted) and
Euler steps x <- x + (sigma_next - sigma) * v, with sigma after the last step = 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

NUM_TRAIN_TIMESTEPS = 1000


def shift_sigmas(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """sigma' = shift * sigma / (1 + (shift - 1) * sigma)."""
    return shift * sigmas / (1.0 + (shift - 1.0) * sigmas)


def inference_sigmas(num_steps: int, shift: float, device=None) -> torch.Tensor:
    """``num_steps + 1`` sigmas, the last one 0 (float32)."""
    if num_steps < 1:
        raise ValueError(f"num_inference_steps must be >= 1, got {num_steps}")
    base = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float32)[:-1]
    sig = shift_sigmas(base, shift)
    return torch.cat([sig, sig.new_zeros(1)]).to(device)


def euler_sample(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    noise: torch.Tensor,
    sigmas: torch.Tensor,
    check_each_step: bool = False,
) -> torch.Tensor:
    """Integrate x from sigma=1 (``noise``) to sigma=0.

    ``velocity(x, timestep)`` returns v for the current x; ``timestep`` = 1000 * sigma as a
    0-d tensor. With ``check_each_step`` a non-finite x raises right after the step that
    produced it (one host sync per step); otherwise the caller checks once at the end.
    """
    x = noise
    for i in range(len(sigmas) - 1):
        v = velocity(x, sigmas[i] * NUM_TRAIN_TIMESTEPS)
        x = x + (sigmas[i + 1] - sigmas[i]) * v
        if check_each_step and not bool(torch.isfinite(x).all()):
            raise FloatingPointError(f"non-finite latents after denoising step {i}")
    return x
