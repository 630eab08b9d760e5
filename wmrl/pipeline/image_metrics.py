"""Image-quality metrics in plain torch (no torchvision / skimage).

Images are float tensors [..., C, H, W] in [0, data_range]; results are per image (the
leading dims), so callers average as they need.

PSNR = 10 log10(data_range^2 / MSE), MSE over C, H, W.
SSIM (Wang et al. 2004) with an 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03,
'valid' filtering (no padding), computed per channel and averaged over channels and pixels:
    SSIM = (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(s_x^2 + s_y^2 + C2)),
    C1 = (K1 L)^2, C2 = (K2 L)^2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape != y.shape or x.ndim < 3:
        raise ValueError(f"metrics need two images of equal shape [..., C, H, W], got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")


def psnr(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0,
         eps: float = 1e-10) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image [...]; identical images give
    10 log10(L^2 / eps) (large but finite)."""
    _check(x, y)
    mse = (x.float() - y.float()).pow(2).flatten(-3).mean(-1)
    return 10.0 * torch.log10(data_range**2 / (mse + eps))


def _gaussian_window(size: int, sigma: float, device) -> torch.Tensor:
    r = torch.arange(size, dtype=torch.float32, device=device) - (size - 1) / 2
    g = torch.exp(-(r**2) / (2 * sigma**2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim(x: torch.Tensor, y: torch.Tensor, data_range: float = 1.0, window: int = 11,
         sigma: float = 1.5, k1: float = 0.01, k2: float = 0.03) -> torch.Tensor:
    """Mean structural similarity per image [...] (1 for identical images)."""
    _check(x, y)
    lead, (c, h, w) = x.shape[:-3], x.shape[-3:]
    if h < window or w < window:
        raise ValueError(f"ssim window {window} is larger than the image {h}x{w}")
    # float64: the variance terms E[x^2] - E[x]^2 cancel badly in float32
    xf = x.double().reshape(-1, c, h, w)
    yf = y.double().reshape(-1, c, h, w)
    kern = _gaussian_window(window, sigma, x.device).double().expand(c, 1, window, window)

    def filt(z: torch.Tensor) -> torch.Tensor:
        return F.conv2d(z, kern, groups=c)

    mu_x, mu_y = filt(xf), filt(yf)
    sxx = filt(xf * xf) - mu_x**2
    syy = filt(yf * yf) - mu_y**2
    sxy = filt(xf * yf) - mu_x * mu_y
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    num = (2 * mu_x * mu_y + c1) * (2 * sxy + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2)
    return (num / den).flatten(1).mean(1).reshape(lead).float()


def u8_video_to_unit(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [..., H, W, 3] -> float [..., 3, H, W] in [0, 1] (the metrics' layout)."""
    return frames.float().div(255.0).movedim(-1, -3)
