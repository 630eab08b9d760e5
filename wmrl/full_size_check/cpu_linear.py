"""bf16 linear layers on a CPU, computed by float32 GEMMs with bf16 rounding.

On a CPU without AVX-512 BF16 or AMX, torch runs a bf16 matrix product in its reference GEMM
(``at::native::cpublas::cpublas_gemm_impl``): ``scripts/bench.py cpu_bf16`` measures a linear
layer's forward and backward 135-214x slower in bf16 than in float32 on this project's 2-core
machine, and one 7B GRPO micro-batch did not finish its backward in 30 minutes. After
``bf16_linears_in_float32(model)`` every bf16 linear layer of ``model`` on the CPU runs as

    y  = bf16( f32(x_b) @ f32(W_b)^T + f32(b_b) )      x_b, W_b, b_b: x, W, b rounded to bf16
    dx = bf16( f32(dy) @ f32(W_b) )                    dW = bf16( f32(dy)^T @ f32(x_b) )

which is what a bf16 GEMM accumulating in float32 computes (oneDNN's, cuBLAS's), up to the
order of the sums. What the layer keeps for its backward is the bf16 ``x_b`` and ``W_b``, as the
stock bf16 layer keeps, and the float32 copies are made ``BLOCK`` weight elements at a time, so
a peak-memory reading stays the bf16 layer's. A linear layer is bf16 when its input and weight
are bf16, or when CPU autocast runs in bf16 (Lightning's ``bf16-mixed``); a float32 input or weight
is rounded to bf16 by a cast autograd sees, so its gradient comes back in float32, as
autocast's. Other devices, float32 layers and mismatched dtypes (an error, as stock) go to
``nn.Linear.forward``.

It exists for measuring real-size bf16 work on a CPU (``wmrl.full_size_check.parts``); a run on
a card never uses it. Only the given modules change; nothing of torch is patched.
"""

from __future__ import annotations

import torch
from torch import nn

BLOCK = 1 << 24  # weight elements made float32 at a time (64 MB)


def _rows(weight: torch.Tensor) -> int:
    return max(1, BLOCK // max(1, weight.shape[1]))


class _Bf16Linear(torch.autograd.Function):
    """y = x W^T + b from bf16 ``x``, ``w``, ``b`` through float32 GEMMs (module docstring)."""

    @staticmethod
    def forward(ctx, x, w, b):
        want_x, want_w = ctx.needs_input_grad[:2]  # keep what the stock layer keeps
        ctx.save_for_backward(x if want_w else None, w if want_x else None)
        ctx.has_bias, ctx.x_shape = b is not None, x.shape
        x32, step = x.reshape(-1, x.shape[-1]).float(), _rows(w)
        y = torch.empty(x32.shape[0], w.shape[0], dtype=torch.bfloat16)
        with torch.autocast("cpu", enabled=False):
            for i in range(0, w.shape[0], step):
                part = x32 @ w[i:i + step].float().t()
                if b is not None:
                    part += b[i:i + step].float()
                y[:, i:i + step] = part
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        want_x, want_w, want_b = ctx.needs_input_grad
        dy32 = dy.reshape(-1, dy.shape[-1]).float()
        dx = dw = db = None
        with torch.autocast("cpu", enabled=False):
            if want_x:
                step = _rows(w)
                dx32 = torch.zeros(dy32.shape[0], w.shape[1])
                for i in range(0, w.shape[0], step):
                    dx32 += dy32[:, i:i + step] @ w[i:i + step].float()
                dx = dx32.to(torch.bfloat16).reshape(ctx.x_shape)
            if want_w:
                dw = (dy32.t() @ x.reshape(-1, x.shape[-1]).float()).to(torch.bfloat16)
            if want_b and ctx.has_bias:
                db = dy32.sum(0).to(torch.bfloat16)
        return dx, dw, db


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.bfloat16 else t.to(torch.bfloat16)


class Float32GemmLinear(nn.Linear):
    """An ``nn.Linear`` whose bf16 work on a CPU runs through float32 GEMMs (module
    docstring); anything else goes to ``nn.Linear.forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight, self.bias
        autocast = (torch.is_autocast_enabled("cpu")
                    and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        if (x.device.type == "cpu" and w.device.type == "cpu"
                and (autocast or x.dtype == w.dtype == torch.bfloat16)):  # else: as stock
            return _Bf16Linear.apply(_bf16(x), _bf16(w), None if b is None else _bf16(b))
        return super().forward(x)


def bf16_linears_in_float32(*modules: nn.Module) -> int:
    """Every ``nn.Linear`` under ``modules`` (peft's LoRA layers hold theirs as children)
    becomes a ``Float32GemmLinear`` in place: its class only, so parameters, hooks and state
    dict stay as they are. Returns how many were switched. A module swap, not a
    ``TorchFunctionMode``: a mode is off while ``backward`` runs (as inside any of its
    handlers), so gradient checkpointing would recompute through the stock layer."""
    n = 0
    for root in modules:
        for m in root.modules():
            if type(m) is nn.Linear:
                m.__class__ = Float32GemmLinear
                n += 1
    return n
