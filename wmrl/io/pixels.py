"""Pixel conversions between uint8 frames [0, 255] and the models' float range [-1, 1]: one
definition for the world model, its training, the reward models and the pipeline."""

from __future__ import annotations

import numpy as np
import torch


def u8_to_unit_np(x: np.ndarray) -> np.ndarray:
    """uint8 [0, 255] -> float32 [-1, 1] (the host/NumPy path)."""
    return x.astype(np.float32) / np.float32(127.5) - np.float32(1.0)


def u8_to_unit_torch(x: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] -> float32 [-1, 1], on the tensor's device (same values as the NumPy
    path: x / 127.5 - 1 in float32)."""
    return x.float().div(127.5).sub(1.0)


def unit_to_u8_torch(x: torch.Tensor) -> torch.Tensor:
    """float32 [-1, 1] -> uint8, rounding to nearest (half to even), on the tensor's device."""
    return ((x + 1.0) * 127.5).clamp_(0, 255).round_().to(torch.uint8)
