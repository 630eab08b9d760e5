"""What a sync is made of: the layout of the buckets and the picklable payload every worker
receives. No transport code here: both sides import it."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from wmrl.weights.dtypes import dtype_name

TRANSPORTS = ("cpu", "gloo", "device")  # what a user configures; "ipc" is chosen by the caller
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class WeightSyncError(RuntimeError):
    """A sync that cannot be applied: wrong layout, missing bucket, wrong base version."""


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a layout's dtype name (``dtype_name``'s spelling, e.g. ``"bfloat16"``;
    any torch dtype, not only the config table's: a policy's buffers may be integers)."""
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise WeightSyncError(f"unknown dtype {name!r} in the weight layout")
    return dt


def bits_dtype(dtype: torch.dtype) -> torch.dtype:
    """Same-width integer dtype used to move and compare raw bits."""
    size = torch.empty((), dtype=dtype).element_size()
    if dtype.is_complex or size not in _BITS:
        raise WeightSyncError(f"dtype {dtype} cannot be synced (element size {size})")
    return _BITS[size]


@dataclass(frozen=True)
class TensorSlot:
    name: str
    shape: tuple[int, ...]
    dtype: str  # torch dtype name, e.g. "bfloat16"
    bucket: int
    offset: int  # first element inside the bucket
    numel: int


@dataclass(frozen=True)
class WeightLayout:
    """Where every tensor sits: buckets hold tensors of one dtype, back to back."""

    slots: tuple[TensorSlot, ...]
    bucket_dtypes: tuple[str, ...]
    bucket_numels: tuple[int, ...]
    fingerprint: str

    @classmethod
    def build(cls, state_dict: Mapping[str, torch.Tensor], bucket_mb: float) -> WeightLayout:
        if bucket_mb <= 0:
            raise ValueError(f"weight_sync.bucket_mb must be > 0, got {bucket_mb}")
        limit = int(bucket_mb * 2**20)
        slots: list[TensorSlot] = []
        dtypes: list[str] = []
        numels: list[int] = []
        open_bucket: dict[torch.dtype, int] = {}  # dtype -> index of its bucket being filled
        for name, t in state_dict.items():
            if not isinstance(t, torch.Tensor) or type(t).__name__ == "DTensor":
                raise TypeError(
                    f"state_dict[{name!r}] is {type(t).__name__}: pass full local tensors "
                    "(gather DTensors with .full_tensor() first)"
                )
            bits_dtype(t.dtype)
            b = open_bucket.get(t.dtype)
            size = t.element_size()
            if b is None or (numels[b] > 0 and (numels[b] + t.numel()) * size > limit):
                b = len(numels)
                open_bucket[t.dtype] = b
                dtypes.append(dtype_name(t.dtype))
                numels.append(0)
            slots.append(
                TensorSlot(name, tuple(t.shape), dtypes[b], b, numels[b], t.numel())
            )
            numels[b] += t.numel()
        key = repr([(s.name, s.shape, s.dtype) for s in slots]) + repr(numels)
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        return cls(tuple(slots), tuple(dtypes), tuple(numels), digest)

    @property
    def num_buckets(self) -> int:
        return len(self.bucket_numels)

    @property
    def nbytes(self) -> int:
        return sum(
            n * torch_dtype(d).itemsize for n, d in zip(self.bucket_numels, self.bucket_dtypes)
        )

    def bucket_slots(self, bucket: int) -> list[TensorSlot]:
        return self._by_bucket[bucket]

    @functools.cached_property
    def _by_bucket(self) -> list[list[TensorSlot]]:
        out: list[list[TensorSlot]] = [[] for _ in self.bucket_numels]
        for s in self.slots:
            out[s.bucket].append(s)
        return out


@dataclass
class DeltaBucket:
    """Changed elements of one bucket: positions (sorted) and their new raw bits."""

    indices: Any  # int32/int64: numpy in a payload, torch tensors on the sender
    values: Any  # raw bits (same-width integer dtype as the bucket)


@dataclass
class SyncPayload:
    """One sync, picklable: ship it to every worker's ``apply_weights``.

    ``buckets[i]`` (cpu transport) is an ObjectRef or the data itself: a tuple of per-tensor
    arrays, one flat array, or a :class:`DeltaBucket`. Collective transports carry no data
    here (``buckets`` is None); ``delta_counts[i]`` says how many elements a delta bucket
    broadcasts."""

    version: int
    layout: WeightLayout
    transport: str
    kinds: tuple[str, ...]  # "full" | "delta" per bucket
    base_version: int | None = None  # the version a delta applies on top of
    buckets: list | None = None
    delta_counts: tuple[int, ...] = ()
    group_src: int = 0

    @property
    def is_delta(self) -> bool:
        return "delta" in self.kinds
