"""The probe path of ``strategies.fused`` for rotary, by function rebinding: a module without
kernel hooks whose *undecorated* class ``forward`` calls a module-level
``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` gets an instance forward, a copy of the
class function whose globals map that name to the fused rotary (``rotary_call`` on q and on k).

Re-creating a function from its code and globals is fragile, so it stays here and narrow: a
decorated forward is refused (re-creating a decorator's closure is what broke on transformers
5.25). RMSNorm needs no rebinding: its probe path sets ``FusedRMSNorm``'s forward on the
instance (``strategies.fused``).
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
from collections.abc import Callable, Iterable

from torch import nn

from strategies.fused_kernels import FusedChoice, Refused, kernel_name, rotary_call


def rotary_name(forward: Callable, names: Iterable[str]) -> str | None:
    """The first of ``names`` that ``forward`` calls as a module-level function, or None."""
    inner = inspect.unwrap(forward)  # a decorated forward is found, then refused
    code = getattr(inner, "__code__", None)
    if code is None:
        return None
    for name in names:
        if name in code.co_names and callable(inner.__globals__.get(name)):
            return name
    return None


@functools.lru_cache(maxsize=None)
def _fused_rotary(original: Callable, kernel: Callable, device_type: str) -> Callable:
    """A drop-in ``apply_rotary_pos_emb`` that runs ``kernel`` on q and k."""
    choice = FusedChoice("rotary", kernel, device_type)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        return rotary_call(choice, original, q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.kernel = kernel_name(kernel)
    return apply_rotary_pos_emb


@functools.lru_cache(maxsize=None)
def _rebound_forward(forward: types.FunctionType, name: str, kernel: Callable,
                     device_type: str) -> types.FunctionType:
    """A copy of the class's plain ``forward`` whose global ``name`` is the fused rotary."""
    fused = _fused_rotary(forward.__globals__[name], kernel, device_type)
    new = types.FunctionType(forward.__code__, {**forward.__globals__, name: fused},
                             forward.__name__, forward.__defaults__, forward.__closure__)
    new.__kwdefaults__ = copy.copy(forward.__kwdefaults__)
    for attr in ("__qualname__", "__doc__", "__module__", "__annotations__"):
        setattr(new, attr, getattr(forward, attr))
    return new


class RotaryForward:
    """Instance-level ``forward`` of a custom attention module (probe path). Pickles as
    (module, name, kernel); the function is rebuilt on demand."""

    def __init__(self, module: nn.Module, name: str, kernel: Callable, device_type: str):
        self.module, self.name, self.kernel, self.device_type = module, name, kernel, device_type

    @property
    def function(self) -> types.FunctionType:
        return _rebound_forward(type(self.module).forward, self.name, self.kernel,
                                self.device_type)

    def __call__(self, *args, **kwargs):
        return self.function(self.module, *args, **kwargs)


def fuse_custom_rotary(module: nn.Module, name: str, kernel: Callable, dev: str,
                       probe: Callable) -> str:
    """Probe path: an undecorated class forward calling a module-level rotary ``name``."""
    forward = type(module).forward
    if hasattr(forward, "__wrapped__"):
        raise Refused(f"{forward.__qualname__} is decorated and its class has no kernel "
                      "hooks: not swapped")
    probe(forward.__globals__[name])
    _rebound_forward(forward, name, kernel, dev)
    module.forward = RotaryForward(module, name, kernel, dev)
    return "probe"
