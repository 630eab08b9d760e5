"""Image-quality metrics per image, from ``torchmetrics.functional``.

Images are float tensors [..., C, H, W] in [0, data_range]; results are per image (the
leading dims), so callers average as they need.

PSNR = 10 log10(data_range^2 / MSE), MSE over C, H, W (``peak_signal_noise_ratio``).
SSIM (Wang et al. 2004) with an 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03,
averaged over channels and every pixel, the image reflect-padded by 5 at its borders
(``structural_similarity_index_measure``, in float64: the variance terms E[x^2] - E[x]^2
cancel badly in float32). The project's own SSIM before it averaged only the pixels the
whole window covers: 0.0003-0.0005 lower on 64x64 frames (tests/finetune/
test_train_world_model.py), so metrics.json figures written before 2026-12-05 compare within
that.
    SSIM = (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(s_x^2 + s_y^2 + C2)),
    C1 = (K1 L)^2, C2 = (K2 L)^2.
"""

from __future__ import annotations

import torch
from torchmetrics.functional.image import (
    peak_signal_noise_ratio,
    structural_similarity_index_measure,
)


def _check(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape != y.shape or x.ndim < 3:
        raise ValueError(f"metrics need two images of equal shape [..., C, H, W], got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")


def psnr(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0,
         max_db: float = 100.0) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image [...], at most ``max_db``: identical images
    (e.g. a static scene and the copy-last-frame baseline) stay finite, so means stay finite."""
    _check(x, y)
    lead, chw = x.shape[:-3], x.shape[-3:]
    out = peak_signal_noise_ratio(x.float().reshape(-1, *chw), y.float().reshape(-1, *chw),
                                  data_range=data_range, reduction="none", dim=(1, 2, 3))
    return out.clamp(max=max_db).reshape(lead)


def ssim(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0, window: int = 11,
         sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03) -> torch.Tensor:
    """Mean structural similarity per image [...] (1 for identical images)."""
    _check(x, y)
    lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
    if h < window or w < window:
        raise ValueError(f"ssim window {window} is larger than the image {h}x{w}")
    out = structural_similarity_index_measure(
        x.double().reshape(-1, c, h, w), y.double().reshape(-1, c, h, w), gaussian_kernel=True,
        sigma=sigma, kernel_size=window, data_range=data_range, k1=k1, k2=k2,
        reduction="none")
    return out.reshape(lead).float()


def u8_video_to_unit(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [..., H, W, 3] -> float [..., 3, H, W] in [0, 1] (the metrics' layout)."""
    return frames.float().div(255.0).movedim(-1, -3)
