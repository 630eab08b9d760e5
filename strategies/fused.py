"""Swap a model's hot ops for the device's fused kernels: RMSNorm and rotary position embedding.

``apply_fused_ops(model, device_type)`` walks ``model.modules()`` and

- ``rms_norm``: gives every RMSNorm-like module (class name ending in ``RMSNorm``, a 1-D
  ``weight`` [hidden], ``variance_epsilon`` or ``eps``, no bias) an instance-level ``forward``
  that calls the kernel ``(x, weight, eps) -> y``: ``torch_npu.npu_rms_norm`` on Ascend,
  ``torch.nn.functional.rms_norm`` elsewhere. Covers transformers' ``LlamaRMSNorm``,
  ``torch.nn.RMSNorm`` (diffusers' Wan ``norm_q``/``norm_k``) and diffusers' ``RMSNorm``.
- ``rotary``: gives every module whose class ``forward`` calls a module-level
  ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` (transformers' Llama family) an
  instance-level ``forward``: a copy of the class's function whose *globals* map that name to
  the fused version (``torch_npu.npu_rotary_mul`` on q and on k). The copy keeps the decorator
  chain (``functools.wraps`` wrappers are re-created around the new inner function).
  Nothing global changes: ``modeling_llama.apply_rotary_pos_emb``, the classes and every other
  model stay eager. Elsewhere than Ascend there is no fused rotary kernel and the eager one
  stays (pass ``kernels={"rotary": fn}`` for your own, e.g. ``torch.compile(rotary_reference)``).

Safety: a module is swapped only after a probe on random data (fp32, random weight, on the
module's own device) shows its eager forward computes the standard formula (``weight * x /
rms(x)``; ``q * cos + rotate_half(q) * sin``): Gemma's ``(1 + weight)``, an interleaved or
partial rotary, a bias are refused and reported. At call time the kernel runs only for tensors
on ``device_type`` (else the eager forward: a model patched for ``npu`` still runs on CPU), with
matching dtypes (else eager, which keeps eager's dtype promotion), and for a full-width rotary.

Parameters, state-dict keys, module classes and FSDP wrapping are untouched; the instance
forwards survive ``copy.deepcopy`` and pickling; ``remove_fused_ops(model)`` restores eager.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from strategies import devices

OPS = ("rms_norm", "rotary")
ROTARY_NAMES = ("apply_rotary_pos_emb",)


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


def resolve_device_type(device_type: str | torch.device | None = "auto") -> str:
    """``"auto"``/None: the first device family with devices (npu, musa, cuda), else cpu."""
    if device_type is None or device_type == "auto":
        return devices.detect_device_type()
    if isinstance(device_type, torch.device):
        return device_type.type
    return str(device_type).split(":")[0]  # "npu:0" parses before torch_npu registers npu


# ---- report ------------------------------------------------------------------------------
@dataclass
class FusedOpsReport:
    """What ``apply_fused_ops`` replaced: per op the module names, per skipped candidate why."""

    device_type: str
    kernels: dict[str, str | None]  # op -> kernel name (None: eager kept, no kernel)
    replaced: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # "op:module name" -> reason

    def count(self, op: str) -> int:
        return len(self.replaced.get(op, []))

    def as_dict(self) -> dict:
        return {"device_type": self.device_type, "kernels": dict(self.kernels),
                "replaced": {k: len(v) for k, v in self.replaced.items()},
                "skipped": dict(self.skipped)}

    def summary(self) -> str:
        parts = []
        for op, kern in self.kernels.items():
            parts.append(f"{op}: {self.count(op)} modules -> {kern}" if kern
                         else f"{op}: eager kept (no fused kernel for {self.device_type})")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        return f"fused ops on {self.device_type}: " + "; ".join(parts)

    __str__ = summary


class _Refused(Exception):
    """A candidate module that is not swapped (the message is the report's reason)."""


# ---- RMSNorm -----------------------------------------------------------------------------
def _rms_norm_candidate(module: nn.Module) -> str | None:
    """The eps attribute name of an RMSNorm-like module; raises _Refused with the reason."""
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.ndim != 1:
        raise _Refused("no 1-D weight (elementwise_affine=False?)")
    if getattr(module, "bias", None) is not None:
        raise _Refused("has a bias")
    for attr in ("variance_epsilon", "eps"):
        if hasattr(module, attr):
            return attr
    raise _Refused("no variance_epsilon / eps attribute")


def _probe_rms_norm(module: nn.Module, eps_attr: str) -> None:
    """The class forward computes weight * x / rms(x) (random fp32 weight and input)."""
    w = module.weight
    if w.device.type == "meta":
        raise _Refused("weights on the meta device (apply after loading them)")
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
        raise _Refused(f"eager forward failed on a probe ({type(err).__name__}: {err})") from None
    want = rw * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape
            and torch.allclose(got.float(), want, rtol=1e-4, atol=1e-5)):
        raise _Refused("eager forward is not weight * x / rms(x) (e.g. Gemma's 1 + weight)")


class _RMSNormForward:
    """Instance-level ``forward`` of an RMSNorm-like module (picklable, deep-copyable)."""

    op = "rms_norm"

    def __init__(self, module: nn.Module, kernel: Callable, eps_attr: str, device_type: str):
        self.module, self.kernel, self.eps_attr = module, kernel, eps_attr
        self.device_type = device_type

    def __call__(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        m = self.module
        w = m.weight
        if (args or kwargs or hidden_states.device.type != self.device_type
                or hidden_states.dtype != w.dtype):
            return type(m).forward(m, hidden_states, *args, **kwargs)
        eps = getattr(m, self.eps_attr)
        if eps is None:  # torch.nn.RMSNorm(eps=None)
            eps = torch.finfo(hidden_states.dtype).eps
        return self.kernel(hidden_states, w, float(eps))


# ---- rotary ------------------------------------------------------------------------------
def _innermost(fn: Callable) -> Callable:
    return inspect.unwrap(fn)


def _rotary_name(forward: Callable, names: Iterable[str]) -> str | None:
    inner = _innermost(forward)
    code = getattr(inner, "__code__", None)
    if code is None:
        return None
    for name in names:
        if name in code.co_names and callable(inner.__globals__.get(name)):
            return name
    return None


def _probe_rotary(fn: Callable) -> None:
    """``fn(q, k, cos, sin, unsqueeze_dim=1)`` computes the rotate-half rotary on q and k."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    if params != ["q", "k", "cos", "sin", "unsqueeze_dim"]:
        raise _Refused(f"signature {params} is not (q, k, cos, sin, unsqueeze_dim)")
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 3, 8, generator=g), torch.randn(2, 2, 3, 8, generator=g)
    cos, sin = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    try:
        with torch.no_grad():
            got = fn(q, k, cos, sin)
    except Exception as err:  # noqa: BLE001
        raise _Refused(f"rotary failed on a probe ({type(err).__name__}: {err})") from None
    c, s = cos[:, None], sin[:, None]
    want = (rotary_reference(q, c, s), rotary_reference(k, c, s))
    if not (isinstance(got, tuple) and len(got) == 2
            and all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, want))):
        raise _Refused("rotary is not q * cos + rotate_half(q) * sin (interleaved / partial?)")


@functools.lru_cache(maxsize=None)
def _fused_rotary(original: Callable, kernel: Callable, device_type: str) -> Callable:
    """A drop-in ``apply_rotary_pos_emb`` that runs ``kernel`` on q and k."""

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if (q.device.type != device_type or cos.shape[-1] != q.shape[-1]
                or k.shape[-1] != q.shape[-1]):
            return original(q, k, cos, sin, unsqueeze_dim)
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return kernel(q, cos, sin), kernel(k, cos, sin)

    apply_rotary_pos_emb.__wrapped_original__ = original
    apply_rotary_pos_emb.kernel = kernel_name(kernel)
    return apply_rotary_pos_emb


def _clone(fn: types.FunctionType, globals_: dict, closure) -> types.FunctionType:
    new = types.FunctionType(fn.__code__, globals_, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = copy.copy(fn.__kwdefaults__)
    new.__dict__.update(fn.__dict__)
    for attr in ("__qualname__", "__doc__", "__module__", "__annotations__"):
        setattr(new, attr, getattr(fn, attr))
    return new


def _rebind(fn: Callable, name: str, replacement: Callable) -> types.FunctionType:
    """A copy of ``fn`` whose global ``name`` is ``replacement``; ``functools.wraps`` wrappers
    (``__wrapped__`` held in their closure) are re-created around the new inner function."""
    if not isinstance(fn, types.FunctionType):
        raise _Refused(f"forward {fn!r} is not a Python function")
    inner = getattr(fn, "__wrapped__", None)
    if inner is None:
        if name not in fn.__code__.co_names:
            raise _Refused(f"{fn.__qualname__} does not look up {name} itself")
        return _clone(fn, {**fn.__globals__, name: replacement}, fn.__closure__)
    cells = fn.__closure__ or ()

    def holds_inner(cell) -> bool:
        try:
            return cell.cell_contents is inner
        except ValueError:  # empty cell
            return False

    hits = {i for i, c in enumerate(cells) if holds_inner(c)}
    if not hits:
        raise _Refused(f"decorator of {fn.__qualname__} does not keep the wrapped function in "
                       "its closure: cannot re-create it")
    new_inner = _rebind(inner, name, replacement)
    closure = tuple(types.CellType(new_inner) if i in hits else c for i, c in enumerate(cells))
    new = _clone(fn, fn.__globals__, closure)
    new.__wrapped__ = new_inner
    return new


@functools.lru_cache(maxsize=None)
def _rebound_forward(forward: Callable, name: str, kernel: Callable,
                     device_type: str) -> types.FunctionType:
    original = _innermost(forward).__globals__[name]
    return _rebind(forward, name, _fused_rotary(original, kernel, device_type))


class _RotaryForward:
    """Instance-level ``forward``: the class's forward with a fused ``apply_rotary_pos_emb``
    in its globals. Pickles as (module, name, kernel); the function is rebuilt on demand."""

    op = "rotary"

    def __init__(self, module: nn.Module, name: str, kernel: Callable, device_type: str):
        self.module, self.name, self.kernel, self.device_type = module, name, kernel, device_type

    @property
    def function(self) -> types.FunctionType:
        return _rebound_forward(type(self.module).forward, self.name, self.kernel,
                                self.device_type)

    def __call__(self, *args, **kwargs):
        return self.function(self.module, *args, **kwargs)


# ---- entry points ------------------------------------------------------------------------
def _is_fused(module: nn.Module) -> bool:
    return isinstance(module.__dict__.get("forward"), (_RMSNormForward, _RotaryForward))


def apply_fused_ops(model: nn.Module, device_type: str | torch.device | None = "auto",
                    ops: Iterable[str] = OPS, kernels: Mapping[str, Callable | None] | None = None,
                    rotary_names: Iterable[str] = ROTARY_NAMES) -> FusedOpsReport:
    """Swap ``model``'s RMSNorm / rotary ops for ``device_type``'s fused kernels in place.

    ``device_type``: ``"auto"`` (npu, musa, cuda with devices, else cpu), or a device type; the
    kernels run only for tensors on it. ``ops``: a subset of ``OPS``. ``kernels``: op -> kernel
    overriding the device's defaults (None keeps that op eager). Apply after the weights are
    loaded (the probes read the module's device) and before wrapping in FSDP or compiling.
    Returns a ``FusedOpsReport``; modules already swapped are left as they are."""
    dev = resolve_device_type(device_type)
    ops = tuple(ops)
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"unknown fused ops {unknown}; choose from {OPS}")
    table = kernels_for(dev)
    table.update(kernels or {})
    if any(table.get(op) in (npu_rms_norm, npu_rotary_mul) for op in ops):
        devices.import_vendor("npu")  # fail here, not in the first forward, without torch_npu
    report = FusedOpsReport(dev, {op: kernel_name(table.get(op)) for op in ops},
                            {op: [] for op in ops})
    names = tuple(rotary_names)
    checked: dict = {}  # (class forward, rotary function) -> None (ok) or refusal reason
    for mod_name, module in model.named_modules():
        if _is_fused(module):
            continue
        is_norm = "rms_norm" in ops and bool(table.get("rms_norm")) and \
            type(module).__name__.endswith("RMSNorm")
        forward = type(module).forward
        rotary = (_rotary_name(forward, names)
                  if not is_norm and "rotary" in ops and table.get("rotary") else None)
        if not (is_norm or rotary):
            continue
        op = "rms_norm" if is_norm else "rotary"
        if "forward" in module.__dict__:  # someone else's instance forward (hooks, adapters)
            report.skipped[f"{op}:{mod_name}"] = "forward already overridden on the instance"
            continue
        try:
            if is_norm:
                eps_attr = _rms_norm_candidate(module)
                _probe_rms_norm(module, eps_attr)
                module.forward = _RMSNormForward(module, table["rms_norm"], eps_attr, dev)
            else:
                key = (forward, _innermost(forward).__globals__[rotary])
                if key not in checked:
                    try:
                        _probe_rotary(key[1])
                        _rebound_forward(forward, rotary, table["rotary"], dev)
                        checked[key] = None
                    except _Refused as why:
                        checked[key] = str(why)
                if checked[key] is not None:
                    raise _Refused(checked[key])
                module.forward = _RotaryForward(module, rotary, table["rotary"], dev)
        except _Refused as why:
            report.skipped[f"{op}:{mod_name}"] = str(why)
            continue
        report.replaced[op].append(mod_name)
    return report


def remove_fused_ops(model: nn.Module) -> int:
    """Restore the eager forwards ``apply_fused_ops`` replaced; returns how many."""
    n = 0
    for module in model.modules():
        if _is_fused(module):
            del module.__dict__["forward"]
            n += 1
    return n


def fused_ops_config(value) -> str | None:
    """A config flag -> a device type for ``apply_fused_ops`` or None (off): false/None/"off"
    -> None; true/"auto" -> "auto"; "npu", "cuda", "cpu", ... as given."""
    if value is None or value is False:
        return None
    if value is True:
        return "auto"
    text = str(value).strip().lower()
    if text in ("", "false", "off", "no", "0", "none"):
        return None
    if text in ("true", "on", "yes", "1", "auto"):
        return "auto"
    return resolve_device_type(text)

