"""What a fused forward runs, whichever path of ``strategies.fused`` set it (the hooks path in
``fused.py``, the probe path in ``fused_probe.py``): the kernels per device, the choice a fused
module carries, the one rotary kernel call, and the probes both paths run before a swap. A probe
runs the eager op on random fp32 data and a random weight and refuses (``Refused``: the reason
is the message) an op that does not compute the kernel's standard formula below: Gemma's
``(1 + weight)``, an interleaved or partial rotary, a bias.
"""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# ---- kernels -----------------------------------------------------------------------------
# rms_norm kernel: (x, weight, eps) -> weight * x / sqrt(mean(x^2, -1) + eps), in x's dtype.
# rotary kernel: (x, cos, sin) -> x * cos + rotate_half(x) * sin, cos/sin broadcastable to x.


def torch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (weight.shape[-1],), weight, eps)


def npu_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return sys.modules["torch_npu"].npu_rms_norm(x, weight, epsilon=eps)[0]


def npu_rotary_mul(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return sys.modules["torch_npu"].npu_rotary_mul(x, cos, sin)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The eager rotary math (the probe's reference; also a kernel to wrap in torch.compile)."""
    return x * cos + rotate_half(x) * sin


torch_rms_norm.kernel = "torch.nn.functional.rms_norm"
npu_rms_norm.kernel = "torch_npu.npu_rms_norm"
npu_rotary_mul.kernel = "torch_npu.npu_rotary_mul"
rotary_reference.kernel = "eager rotary (strategies.fused.rotary_reference)"

KERNELS: dict[str, dict[str, Callable | None]] = {
    "npu": {"rms_norm": npu_rms_norm, "rotary": npu_rotary_mul},
}
DEFAULT_KERNELS: dict[str, Callable | None] = {"rms_norm": torch_rms_norm, "rotary": None}


def kernels_for(device_type: str) -> dict[str, Callable | None]:
    """op -> kernel for ``device_type`` (None: no fused kernel, the eager op stays)."""
    return dict(KERNELS.get(device_type, DEFAULT_KERNELS))


def kernel_name(fn: Callable | None) -> str | None:
    if fn is None:
        return None
    return getattr(fn, "kernel", None) or f"{getattr(fn, '__module__', '?')}." \
        f"{getattr(fn, '__qualname__', type(fn).__name__)}"


# ---- what a fused module carries ---------------------------------------------------------
@dataclass(frozen=True)
class FusedChoice:
    """What a fused module runs: the kernel, for tensors on ``device_type``; ``eps_attr`` names
    the module's epsilon. Kept on the module instance (``FUSED_ATTR``), so copies keep it."""

    op: str
    kernel: Callable
    device_type: str
    eps_attr: str | None = None


FUSED_ATTR = "_strategies_fused"


def rotary_call(choice: FusedChoice, eager: Callable, q, k, cos, sin, unsqueeze_dim=1):
    """``apply_rotary_pos_emb`` through ``choice.kernel`` on q and on k; ``eager`` for tensors
    on another device or a partial-width rotary."""
    if (q.device.type != choice.device_type or cos.shape[-1] != q.shape[-1]
            or k.shape[-1] != q.shape[-1]):
        return eager(q, k, cos, sin, unsqueeze_dim)
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return choice.kernel(q, cos, sin), choice.kernel(k, cos, sin)


# ---- probes ------------------------------------------------------------------------------
class Refused(Exception):
    """A candidate module that is not swapped (the message is the report's reason)."""


def rms_norm_eps_attr(module: nn.Module) -> str:
    """The eps attribute name of an RMSNorm-like module; raises Refused with the reason."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.ndim != 1:
        raise Refused("no 1-D weight (elementwise_affine=False?)")
    if getattr(module, "bias", None) is not None:
        raise Refused("has a bias")
    params = list(inspect.signature(type(module).forward).parameters)[1:]
    if len(params) != 1:  # kernels checks a layer's signature only against the first class
        raise Refused(f"forward takes {params}, not one input")
    for attr in ("variance_epsilon", "eps"):
        if hasattr(module, attr):
            return attr
    raise Refused("no variance_epsilon / eps attribute")


def probe_rms_norm(module: nn.Module, eps_attr: str) -> None:
    """The class forward computes weight * x / rms(x) (random fp32 weight and input)."""
    w = module.weight
    if w.device.type == "meta":
        raise Refused("weights on the meta device (apply after loading them)")
    g = torch.Generator(device="cpu").manual_seed(0)
    hidden = w.shape[0]
    x = torch.randn(3, hidden, generator=g).to(w.device)
    rw = (torch.rand(hidden, generator=g) + 0.5).to(w.device)
    probe = copy.copy(module)  # shallow: the class forward on a private random weight
    probe._parameters = dict(module._parameters)
    probe._parameters["weight"] = nn.Parameter(rw, requires_grad=False)
    eps = getattr(module, eps_attr)
    eps = torch.finfo(torch.float32).eps if eps is None else float(eps)
    try:
        with torch.no_grad():
            got = type(module).forward(probe, x)
    except Exception as err:  # noqa: BLE001 - any failure means: not a plain RMSNorm
        raise Refused(f"eager forward failed on a probe ({type(err).__name__}: {err})") from None
    want = rw * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape
            and torch.allclose(got.float(), want, rtol=1e-4, atol=1e-5)):
        raise Refused("eager forward is not weight * x / rms(x) (e.g. Gemma's 1 + weight)")


def probe_rotary(fn: Callable) -> None:
    """``fn(q, k, cos, sin, unsqueeze_dim=1)`` computes the rotate-half rotary on q and k."""
    try:  # a function, or transformers' hooked one (an nn.Module: its forward's signature)
        params = list(inspect.signature(fn.forward if isinstance(fn, nn.Module) else fn)
                      .parameters)
    except (TypeError, ValueError):
        params = []
    if params != ["q", "k", "cos", "sin", "unsqueeze_dim"]:
        raise Refused(f"signature {params} is not (q, k, cos, sin, unsqueeze_dim)")
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 3, 8, generator=g), torch.randn(2, 2, 3, 8, generator=g)
    cos, sin = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    try:
        with torch.no_grad():
            got = fn(q, k, cos, sin)
    except Exception as err:  # noqa: BLE001
        raise Refused(f"rotary failed on a probe ({type(err).__name__}: {err})") from None
    c, s = cos[:, None], sin[:, None]
    want = (rotary_reference(q, c, s), rotary_reference(k, c, s))
    if not (isinstance(got, tuple) and len(got) == 2
            and all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, want))):
        raise Refused("rotary is not q * cos + rotate_half(q) * sin (interleaved / partial?)")
