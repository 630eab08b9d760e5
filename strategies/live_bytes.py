"""``LiveBytes``: the bytes of the tensor storages alive under a ``TorchDispatchMode``, and
their peak, so a forward run on the meta device measures the memory it would hold on a real
one (without allocator caching)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    """Bytes of live tensor storages created under the mode, and their peak.

    Every tensor an op returns is counted once per storage; the storage's bytes are released
    when the last tensor seen on it is garbage (``weakref.finalize``; a tensor C++ still holds
    keeps its Python object, so a storage counts while anything uses it). Works on meta
    tensors: the peak is what eager execution would hold, without allocator caching.
    ``ignore``: tensors whose storages are never counted (a model's parameters and buffers,
    which views such as a Linear's transposed weight share, and autograd keeps for backward)."""

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._storages: dict[int, list[int]] = {}  # key -> [bytes, tensors]
        self._ignore = {t.untyped_storage()._cdata for t in ignore}

    def reset_peak(self) -> None:
        self.peak = self.live

    def _release(self, key: int) -> None:
        entry = self._storages[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._storages[key]
            self.live -= entry[0]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self._ignore:
                continue
            entry = self._storages.get(key)
            if entry is None:
                self._storages[key] = [storage.nbytes(), 1]
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            else:
                entry[1] += 1
            weakref.finalize(t, self._release, key)
        return out
