"""Transports ``gloo`` and ``device``: one code path, broadcasts over a process group.

``gloo``: each bucket is flattened on the trainer and broadcast over the gloo backend of the
trainer rank's :class:`~wmrl.rollout.sync_group.SyncGroup` with its policy actors
(``ActorSync`` builds it), or a torch.distributed group. ``device``: the same on the
accelerator (NCCL/RCCL/HCCL/MCCL group); it fails at construction when the process has no
accelerator. The payload carries no data, only what each worker must receive; a worker that
rejects a sync still receives (and drops) its broadcasts, so the trainer never hangs.

The two halves are mixins of :class:`~wmrl.rollout.weight_sync.sender.WeightSender` and
:class:`~wmrl.rollout.weight_sync.receiver.WeightReceiver`, whose state they use.
"""

from __future__ import annotations

from typing import Any

import torch

from wmrl.rollout.sync_group import broadcast
from wmrl.rollout.weight_sync.codec import flatten, index_dtype
from wmrl.rollout.weight_sync.types import (
    DeltaBucket,
    SyncPayload,
    WeightSyncError,
    bits_dtype,
    torch_dtype,
)


def collective_device(transport: str) -> torch.device:
    """Where ``transport``'s broadcasts are staged: this process's accelerator for ``device``,
    else the CPU."""
    if transport != "device":
        return torch.device("cpu")
    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if acc is None:
        raise WeightSyncError(
            "weight_sync.transport='device' needs an accelerator (CUDA/ROCm/NPU/MUSA) in this "
            "process and none is available; use transport='cpu' (Ray object store) or 'gloo'"
        )
    return torch.device(acc.type, torch.accelerator.current_device_index())


class CollectiveSenderMixin:
    def use_group(self, group: Any, device: torch.device | str | None = None) -> None:
        """Send over ``group`` (e.g. a :class:`~wmrl.rollout.sync_group.SyncGroup`), staging
        device-transport buckets on ``device`` (the trainer rank's; default: current)."""
        self.group = group
        if self.transport == "device" and device is not None:
            self.device = self._data_device = torch.device(device)
            self._last = None  # delta bits live on the staging device
            self._buf = None
            self.reset()

    def send(self, payload: SyncPayload) -> None:
        """Collective transports: broadcast the buckets of ``payload`` (no-op for ``cpu``)."""
        if self.transport in ("cpu", "ipc"):
            return
        if self._pending is None or self._pending[0] != payload.version:
            raise WeightSyncError(
                f"send(version={payload.version}) without a matching prepare() on this sender"
            )
        _, data = self._pending
        self._pending = None
        for b, entry in enumerate(data):
            if isinstance(entry, DeltaBucket):
                tensors = [entry.indices, entry.values]
            elif isinstance(entry, list):
                bits = bits_dtype(torch_dtype(payload.layout.bucket_dtypes[b]))
                nbytes = payload.layout.bucket_numels[b] * bits.itemsize
                buf = self._send_buffer(nbytes).view(bits)
                flatten(entry, buf)
                tensors = [buf]
            else:
                tensors = [entry]
            for t in tensors:  # as bytes: gloo has no int16 (the bits of bf16/fp16)
                broadcast(t.view(torch.uint8), self.group, self.group_src)

    def _send_buffer(self, nbytes: int) -> torch.Tensor:
        buf = getattr(self, "_buf", None)
        if buf is None or buf.numel() < nbytes:
            buf = self._buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return buf[:nbytes]


class CollectiveReceiverMixin:
    def _apply_collective(self, p: SyncPayload, drain: bool = False) -> None:
        """Receive every broadcast of ``p`` in order; ``drain``: receive and discard."""
        device = collective_device(p.transport)
        try:
            for b, numel in enumerate(p.layout.bucket_numels):
                bits = bits_dtype(torch_dtype(p.layout.bucket_dtypes[b]))
                slots = p.layout.bucket_slots(b)
                if p.kinds[b] == "delta":
                    n = p.delta_counts[b]
                    idx = torch.empty(n, dtype=index_dtype(numel), device=device)
                    vals = torch.empty(n, dtype=bits, device=device)
                    for t in (idx, vals):
                        broadcast(t.view(torch.uint8), self.group, p.group_src)
                    if not drain:
                        self._scatter(slots, idx, vals)
                    continue
                flat = self._recv_buffer(numel * bits.itemsize, device).view(bits)
                broadcast(flat.view(torch.uint8), self.group, p.group_src)
                for s in slots if not drain else ():
                    self._copy(s, flat[s.offset: s.offset + s.numel])
        except BaseException as e:
            if not drain:
                self._broken = f"sync v{p.version} failed: {e!r}"
            raise

    def _recv_buffer(self, nbytes: int, device: torch.device) -> torch.Tensor:
        buf = getattr(self, "_buf", None)
        if buf is None or buf.numel() < nbytes or buf.device != device:
            buf = self._buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return buf[:nbytes]
