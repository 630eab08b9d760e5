"""Why ``scripts/full_size_check.py`` runs the VAE in float32 and bf16 linear layers through
float32 GEMMs on a CPU: the same CPU kernels in float32, in bf16, and (the linear layers) in
bf16 through ``wmrl.full_size_check.cpu_linear``, side by side in one run. A Wan-VAE-like 3-D
convolution (3x3x3, ``channels`` in and out, on ``frames`` x ``size`` x ``size``) and a DiT- /
Llama-like linear layer (``tokens`` x ``width`` -> ``hidden``, no bias), forward and backward
(the gradient of the input, as a frozen LoRA base needs it). Seconds of one call after a warm-up; the ratios
are over float32. On a CPU without AVX-512 BF16 or AMX torch has no fast bf16 path for these."""

from __future__ import annotations

import time

import torch

from wmrl.full_size_check.cpu_linear import bf16_linears_in_float32


def _seconds(fn) -> float:
    fn()  # warm-up (kernel choice, allocation)
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _times(dtype: torch.dtype, channels: int, frames: int, size: int, tokens: int,
           width: int, hidden: int, float32_gemms: bool = False) -> dict[str, float]:
    g = torch.Generator().manual_seed(0)
    conv = torch.nn.Conv3d(channels, channels, 3, padding=1).to(dtype)
    video = torch.randn(1, channels, frames, size, size, generator=g).to(dtype)
    linear = torch.nn.Linear(width, hidden, bias=False).to(dtype).requires_grad_(False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(hidden, width, generator=g) * 0.02)
    if float32_gemms:
        bf16_linears_in_float32(linear)
    x = torch.randn(tokens, width, generator=g).to(dtype).requires_grad_(True)

    def linear_backward():
        x.grad = None
        linear(x).sum().backward()

    t = {}
    with torch.no_grad():
        if not float32_gemms:  # cpu_linear has no convolutions
            t["conv3d_forward_s"] = _seconds(lambda: conv(video))
        t["linear_forward_s"] = _seconds(lambda: linear(x))
    t["linear_forward_backward_s"] = _seconds(linear_backward)
    return t


def run(channels: int = 64, frames: int = 3, size: int = 32, tokens: int = 256,
        width: int = 3072, hidden: int = 3072) -> list[dict]:
    shape = dict(channels=channels, frames=frames, size=size, tokens=tokens, width=width,
                 hidden=hidden)
    f32, bf16 = (_times(dt, **shape) for dt in (torch.float32, torch.bfloat16))
    gemm = _times(torch.bfloat16, **shape, float32_gemms=True)
    rows = []
    for figure in f32:
        row = {"name": f"cpu_bf16.{figure}", "value": round(bf16[figure], 4), "unit": "s",
               "float32_s": round(f32[figure], 4),
               "ratio_bf16_over_float32": round(bf16[figure] / f32[figure], 1)}
        if figure in gemm:
            row.update(bf16_float32_gemms_s=round(gemm[figure], 4),
                       ratio_float32_gemms_over_float32=round(gemm[figure] / f32[figure], 2))
        rows.append({**row, **shape, "threads": torch.get_num_threads()})
    return rows
