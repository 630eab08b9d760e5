"""Trainer side: :class:`WeightSender` (layout, delta base, one payload per sync) and
:func:`push_weights` (one sync to Ray actors). What each transport does is in its module,
mixed in here: ``store`` (cpu), ``ipc``, ``collective`` (gloo, device)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wmrl.rollout.config import WeightSyncConfig
from wmrl.rollout.weight_sync.codec import encode_delta, flatten
from wmrl.rollout.weight_sync.collective import CollectiveSenderMixin, collective_device
from wmrl.rollout.weight_sync.ipc import IpcSenderMixin
from wmrl.rollout.weight_sync.store import StoreSenderMixin
from wmrl.rollout.weight_sync.types import (
    TRANSPORTS,
    DeltaBucket,
    SyncPayload,
    WeightLayout,
    WeightSyncError,
    bits_dtype,
    torch_dtype,
)


class WeightSender(StoreSenderMixin, IpcSenderMixin, CollectiveSenderMixin):
    """Trainer side. ``prepare(state_dict, version)`` -> :class:`SyncPayload`; for collective
    transports call ``send(payload)`` while the workers run ``apply``."""

    def __init__(
        self,
        bucket_mb: float = WeightSyncConfig.bucket_mb,  # rollout.weight_sync's defaults
        delta: bool = WeightSyncConfig.delta,
        transport: str = WeightSyncConfig.transport,
        max_delta_fraction: float = WeightSyncConfig.max_delta_fraction,
        group: Any = None,
        group_src: int = 0,
        use_object_store: bool = True,
    ):
        if transport not in TRANSPORTS:
            raise ValueError(f"weight_sync.transport must be one of {TRANSPORTS}, got {transport!r}")
        self.bucket_mb = bucket_mb
        self.delta = delta
        self.transport = transport
        self.max_delta_fraction = max_delta_fraction
        self.group = group
        self.group_src = group_src
        self.use_object_store = use_object_store
        self.device = collective_device(transport)
        self._data_device = torch.device("cpu") if transport == "cpu" else self.device
        self._layout: WeightLayout | None = None
        self._layout_key: tuple | None = None
        self._last: list[torch.Tensor] | None = None  # delta: bits the workers hold
        self._last_version: int | None = None
        self._pending: tuple[int, list] | None = None  # collective: data waiting for send()

    def reset(self) -> None:
        """Forget what was sent: the next sync is full (after a failed push or a new worker)."""
        self._last_version = None

    def layout(self, state_dict: Mapping[str, torch.Tensor]) -> WeightLayout:
        key = tuple((k, tuple(v.shape), v.dtype) for k, v in state_dict.items())
        if key != self._layout_key:
            self._layout = WeightLayout.build(state_dict, self.bucket_mb)
            self._layout_key = key
            self._last = None
            self.reset()
        return self._layout

    def prepare(self, state_dict: Mapping[str, torch.Tensor], version: int) -> SyncPayload:
        if self.transport == "ipc":
            return self._prepare_ipc(state_dict, version)
        layout = self.layout(state_dict)
        tensors = list(state_dict.values())
        per_bucket: list[list[torch.Tensor]] = [[] for _ in range(layout.num_buckets)]
        for slot, t in zip(layout.slots, tensors):
            per_bucket[slot.bucket].append(t)
        base = self._last_version if self.delta else None
        if self.delta and self._last is None:
            self._last = [  # what the workers hold, as raw bits; allocated once
                torch.empty(n, dtype=bits_dtype(torch_dtype(d)), device=self._data_device)
                for n, d in zip(layout.bucket_numels, layout.bucket_dtypes)
            ]
        kinds, data, counts = [], [], []
        for b, group in enumerate(per_bucket):
            entry: Any = group  # full: flattened later, by Ray's put or by cat before send
            if self.delta:
                entry = (encode_delta(self._last[b], group, self.max_delta_fraction)
                         if base is not None else None)
                if entry is None:  # first sync or dense change: full, from the new bits
                    entry = flatten(group, self._last[b])
            kind = "delta" if isinstance(entry, DeltaBucket) else "full"
            kinds.append(kind)
            counts.append(entry.indices.numel() if kind == "delta" else 0)
            data.append(entry)
        if self.delta:
            self._last_version = version
        payload = SyncPayload(
            version=version,
            layout=layout,
            transport=self.transport,
            kinds=tuple(kinds),
            base_version=base if "delta" in kinds else None,
            delta_counts=tuple(counts),
            group_src=self.group_src,
        )
        if self.transport == "cpu":
            payload.buckets = [self._to_store(x) for x in data]
        else:
            self._pending = (version, data)
        return payload


def push_weights(
    sender: WeightSender,
    state_dict: Mapping[str, torch.Tensor],
    version: int,
    actors: Sequence[Any],
    method: str = "apply_weights",
    timeout_s: float | None = None,
) -> list[int]:
    """Sync ``state_dict`` as ``version`` to Ray actors whose ``method(payload)`` calls
    :meth:`WeightReceiver.apply`; returns their versions. On any failure the sender forgets
    its delta base (next push is full) and the error is raised."""
    import ray

    try:
        payload = sender.prepare(state_dict, version)
        refs = [getattr(a, method).remote(payload) for a in actors]
        sender.send(payload)
        del payload  # drop our object-store refs as soon as the workers hold theirs
        versions = ray.get(refs, timeout=timeout_s)
    except BaseException:
        sender.reset()
        raise
    finally:
        sender.release()
    if any(v != version for v in versions):
        sender.reset()
        raise WeightSyncError(f"workers report versions {versions} after pushing v{version}")
    return versions
