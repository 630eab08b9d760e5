"""Worker side: :class:`WeightReceiver` checks a payload against its weights, applies it
through the payload's transport (``store``, ``ipc``, ``collective``, mixed in here) and flips
its version once every bucket landed."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from wmrl.rollout.weight_sync.codec import delta_runs
from wmrl.rollout.weight_sync.collective import CollectiveReceiverMixin
from wmrl.rollout.weight_sync.ipc import IpcReceiverMixin
from wmrl.rollout.weight_sync.store import StoreReceiverMixin
from wmrl.rollout.weight_sync.types import SyncPayload, TensorSlot, WeightSyncError
from wmrl.weights.dtypes import dtype_name


class WeightReceiver(StoreReceiverMixin, IpcReceiverMixin, CollectiveReceiverMixin):
    """Worker side: ``apply(payload) -> version``. ``module`` is an nn.Module or a mapping
    name -> tensor whose storage is the live weights (e.g. ``module.state_dict()``).

    ``zero_copy=True`` (cpu transport, CPU weights, an nn.Module): instead of copying, the
    module's parameters and buffers are re-pointed at the read-only views into Ray's shared
    memory (``param.data = view``), so applying a sync moves no bytes and every worker on a
    node shares one copy of the weights. Only for inference workers: an in-place write to
    such a weight would change the shared object. A delta first gives the touched tensors
    a private copy.

    ``keep(name)``: only those entries are synced (a LoRA policy's adapters: its frozen base
    is built the same on both sides and never sent)."""

    def __init__(self, module: torch.nn.Module | Mapping[str, torch.Tensor], version: int = -1,
                 group: Any = None, zero_copy: bool = False,
                 keep: Callable[[str], bool] | None = None):
        self.module = module if isinstance(module, torch.nn.Module) else None
        self.keep = keep
        sd = module.state_dict() if self.module is not None else module
        self.targets: dict[str, torch.Tensor] = self._kept(sd)
        self.group = group
        self.zero_copy = zero_copy
        self._owners: dict[str, list[tuple[torch.nn.Module, str, bool]]] = {}
        self.aliased: set[str] = set()  # names whose tensor is a view into the object store
        self._alias_ptr: dict[str, int] = {}
        if zero_copy:
            self._owners = _owners(module, self.targets)
        self._version = version
        self._broken: str | None = None  # set when a sync failed half-way
        self._checked: set[str] = set()  # layout fingerprints that matched
        self.lock = threading.RLock()

    @property
    def version(self) -> int:
        if self._broken:
            raise WeightSyncError(f"weights are partial ({self._broken}); a full sync is needed")
        return self._version

    @contextlib.contextmanager
    def reading(self) -> Iterator[int]:
        """Hold the weights fixed (no sync applies meanwhile); yields their version."""
        with self.lock:
            yield self.version

    def apply(self, payload: SyncPayload) -> int:
        with self.lock:
            self._refresh()
            try:
                self._check(payload)
            except WeightSyncError:
                if payload.transport not in ("cpu", "ipc"):  # take part, or the sender hangs
                    self._apply_collective(payload, drain=True)
                raise
            if payload.transport == "cpu":
                self._apply_store(payload)
            elif payload.transport == "ipc":
                self._apply_ipc(payload)
            else:
                self._apply_collective(payload)
            self._version = payload.version  # flips only after every bucket landed
            self._broken = None
            return self._version

    def _refresh(self) -> None:
        """Re-read the module's tensors: ``module.to(...)`` (e.g. offloading) replaces them."""
        if self.module is None:
            return
        self.targets = self._kept(self.module.state_dict())
        self.aliased = {n for n in self.aliased
                        if self.targets[n].data_ptr() == self._alias_ptr.get(n)}

    def _kept(self, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v for k, v in state.items() if self.keep is None or self.keep(k)}

    def _check(self, p: SyncPayload) -> None:
        layout = p.layout
        if layout.fingerprint not in self._checked:
            names = [s.name for s in layout.slots]
            missing = sorted(set(self.targets) - set(names))
            unexpected = sorted(set(names) - set(self.targets))
            if missing or unexpected:
                raise WeightSyncError(
                    f"sync layout does not match this worker's weights: missing {missing[:5]}, "
                    f"unexpected {unexpected[:5]} - trainer and rollout policy configs differ"
                )
            for s in layout.slots:
                t = self.targets[s.name]
                if tuple(t.shape) != s.shape or dtype_name(t.dtype) != s.dtype:
                    raise WeightSyncError(
                        f"{s.name}: sync sends {s.dtype}{list(s.shape)}, worker has "
                        f"{dtype_name(t.dtype)}{list(t.shape)}"
                    )
            self._checked.add(layout.fingerprint)
        n = layout.num_buckets
        carried = p.transport in ("cpu", "ipc")  # the payload holds the buckets
        if len(p.kinds) != n or (carried and len(p.buckets or ()) != n):
            got = len(p.buckets or ()) if carried else len(p.kinds)
            raise WeightSyncError(f"partial sync v{p.version}: {got} of {n} buckets")
        if p.version < self._version and not self._broken:
            raise WeightSyncError(f"stale sync v{p.version}: this worker has v{self._version}")
        if p.is_delta and (self._broken or p.base_version != self._version):
            have = "partial weights" if self._broken else f"v{self._version}"
            raise WeightSyncError(
                f"delta sync v{p.version} applies on v{p.base_version} but this worker has "
                f"{have}; call WeightSender.reset() and send a full sync"
            )

    # ---- writing into the weights (every transport) ------------------------------------
    def _copy(self, s: TensorSlot, bits: torch.Tensor) -> None:
        t = self.targets[s.name]
        if s.name in self.aliased:  # never write into the shared object: take a private copy
            self._set(s.name, bits.view(t.dtype).view(t.shape).clone(), aliased=False)
        else:
            t.copy_(bits.view(t.dtype).view(t.shape))

    def _set(self, name: str, tensor: torch.Tensor, aliased: bool) -> None:
        """Re-point the module's parameter/buffer ``name`` at ``tensor``."""
        for mod, attr, is_param in self._owners[name]:
            if is_param:
                mod._parameters[attr].data = tensor
            else:
                mod._buffers[attr] = tensor
        self.targets[name] = tensor
        if aliased:
            self.aliased.add(name)
            self._alias_ptr[name] = tensor.data_ptr()
        else:
            self.aliased.discard(name)

    def _scatter(self, slots: list[TensorSlot], idx: torch.Tensor, vals: torch.Tensor) -> None:
        """Write changed elements: ``target.flat[idx - slot.offset] = vals`` per slot."""
        for s, start, stop in delta_runs(slots, idx):
            if s.name in self.aliased:
                self._set(s.name, self.targets[s.name].clone(), aliased=False)
            t = self.targets[s.name]
            if not t.is_contiguous():
                raise WeightSyncError(f"{s.name}: delta sync needs a contiguous tensor")
            local = (idx[start:stop].long() - s.offset).to(t.device)
            t.view(-1).view(vals.dtype)[local] = vals[start:stop].to(t.device)


def _owners(module: Any, targets: Mapping[str, torch.Tensor]) -> dict:
    """name -> every (submodule, attribute, is_parameter) that holds it (tied weights too)."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("WeightReceiver(zero_copy=True) needs the nn.Module, not a mapping")
    owners: dict[str, list] = {}
    for kind, named in ((True, module.named_parameters), (False, module.named_buffers)):
        for name, t in named(remove_duplicate=False):
            if name in targets:
                if t.device.type != "cpu":
                    raise WeightSyncError(
                        f"zero_copy needs CPU weights; {name} is on {t.device} - use copies"
                    )
                mod_name, _, attr = name.rpartition(".")
                owners.setdefault(name, []).append((module.get_submodule(mod_name), attr, kind))
    missing = sorted(set(targets) - set(owners))
    if missing:
        raise WeightSyncError(f"zero_copy: state_dict entries {missing[:5]} are not "
                              "parameters or buffers of the module")
    return owners
