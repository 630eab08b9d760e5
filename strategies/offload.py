"""Role offloading: move a module's parameters, gradients and buffers and its optimizer's state
to host memory and back, so another role (rollout, world model) can use the device.

FSDP2 modules are resharded first, so only each rank's shard moves; FSDP2's ``_apply`` then
re-registers the sharded parameters on the new device.
"""

from __future__ import annotations

import sys
import time
import weakref
from dataclasses import dataclass

import torch
from torch import nn

# Where each module / optimizer lived before its last offload (restored by onload).
_HOME: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class MoveStats:
    """One offload/onload: wall seconds (device synchronised), bytes moved, target device."""

    seconds: float
    bytes: int
    device: str

    @property
    def gb_per_s(self) -> float:
        return self.bytes / 1e9 / self.seconds if self.seconds > 0 else float("inf")


def _loaded(module: str, name: str) -> type | None:
    """``module.name`` if that module is imported, else None. A DTensor or an FSDP2 module can
    only exist once torch.distributed.tensor / .fsdp is loaded; not importing them here saves
    every rollout actor ~2.5 s of CPU at its start."""
    mod = sys.modules.get(module)
    return getattr(mod, name) if mod is not None else None


def _is_dtensor(t) -> bool:
    cls = _loaded("torch.distributed.tensor", "DTensor")
    return cls is not None and isinstance(t, cls)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if _is_dtensor(t) else t


def _nbytes(t: torch.Tensor) -> int:
    loc = _local(t)
    return loc.numel() * loc.element_size()


def _sync(device: torch.device) -> None:
    mod = getattr(torch, device.type, None)
    if device.type != "cpu" and mod is not None and callable(getattr(mod, "synchronize", None)):
        mod.synchronize()


def _home_device(module: nn.Module | None, optimizer) -> torch.device:
    """The device of the first parameter/buffer (or optimizer state tensor) found."""
    if module is not None:
        for t in list(module.parameters()) + list(module.buffers()):
            return _local(t).device
    if optimizer is not None:
        for _, _, t in _state_tensors(optimizer):
            return _local(t).device
    return torch.device("cpu")


def _state_tensors(optimizer: torch.optim.Optimizer):
    """(state dict, key, tensor) for every non-scalar optimizer state tensor. 0-dim tensors such
    as Adam's ``step`` stay put: they are tiny and Adam expects them on the host."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                yield state, key, value


def _module_bytes(module: nn.Module) -> int:
    total = sum(_nbytes(p) for p in module.parameters())
    total += sum(_nbytes(p.grad) for p in module.parameters() if p.grad is not None)
    return total + sum(_nbytes(b) for b in module.buffers())


def _move(module: nn.Module | None, optimizer, device: torch.device, pin: bool) -> int:
    moved = 0
    fsdp_module = _loaded("torch.distributed.fsdp", "FSDPModule")
    if module is not None:
        for sub in module.modules():
            if fsdp_module is not None and isinstance(sub, fsdp_module):
                sub.reshard()  # free unsharded copies; only shards move
        moved = _module_bytes(module)
        module.to(device)
    if optimizer is not None:
        for state, key, value in list(_state_tensors(optimizer)):
            moved += _nbytes(value)
            new = value.to(device)
            if pin and device.type == "cpu" and not _is_dtensor(new):
                new = new.pin_memory()
            state[key] = new
    return moved


def offload(
    module: nn.Module | None,
    optimizer: torch.optim.Optimizer | None = None,
    device: str | torch.device = "cpu",
    pin_memory: bool = False,
    empty_cache: bool = True,
) -> MoveStats:
    """Move ``module`` (params, grads, buffers) and ``optimizer`` state to ``device`` (host by
    default), remembering where they were for ``onload``. ``pin_memory`` speeds up the way back
    on CUDA-like devices."""
    device = torch.device(device)
    home = _home_device(module, optimizer)
    for obj in (module, optimizer):
        if obj is not None:
            _HOME[obj] = home
    _sync(home)
    start = time.perf_counter()
    moved = _move(module, optimizer, device, pin_memory and home.type != "cpu")
    _sync(home)
    seconds = time.perf_counter() - start
    mod = getattr(torch, home.type, None)
    if empty_cache and home.type != "cpu" and callable(getattr(mod, "empty_cache", None)):
        mod.empty_cache()
    return MoveStats(seconds, moved, str(device))


def onload(
    module: nn.Module | None,
    optimizer: torch.optim.Optimizer | None = None,
    device: str | torch.device | None = None,
) -> MoveStats:
    """Move ``module`` and ``optimizer`` state back to ``device`` (default: where ``offload``
    found them)."""
    if device is None:
        key = module if module is not None else optimizer
        if key is None or key not in _HOME:
            raise ValueError(
                "onload(device=None) needs a previous offload() of this module/optimizer; "
                "pass device=."
            )
        device = _HOME[key]
    device = torch.device(device)
    start = time.perf_counter()
    moved = _move(module, optimizer, device, pin=False)
    _sync(device)
    return MoveStats(time.perf_counter() - start, moved, str(device))
