"""Transport ``ipc``: chosen by ``ActorSync`` for ``device`` when the workers share the
trainer's card (collocated), where NCCL cannot pair two ranks.

Each bucket is flattened into a device buffer whose CUDA IPC handle is sent; a worker opens it
and copies device to device, nothing goes through the host; the buffers are freed after the
sync. CUDA/ROCm only; elsewhere, or when the driver refuses IPC, ``ActorSync`` falls back to
the object store (``use_store``).

The two halves are mixins of :class:`~wmrl.rollout.weight_sync.sender.WeightSender` and
:class:`~wmrl.rollout.weight_sync.receiver.WeightReceiver`, whose state they use.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from wmrl.rollout.weight_sync.codec import flatten
from wmrl.rollout.weight_sync.types import SyncPayload, WeightSyncError, bits_dtype, torch_dtype


class IpcSenderMixin:
    def use_ipc(self, device: torch.device | str) -> None:
        """Workers share the card ``device``: send CUDA IPC handles of device buffers."""
        self.transport = "ipc"
        self.device = self._data_device = torch.device(device)
        self._ipc_bufs: list[torch.Tensor] | None = None
        self.reset()

    def release(self) -> None:
        """After every worker applied a sync: free the IPC buffers (a full copy of the weights
        on the trainer's card must not stay there through the rollout)."""
        if getattr(self, "_ipc_bufs", None) is not None:
            self._ipc_bufs = None
            mod = getattr(torch, self.device.type, None)
            if callable(getattr(mod, "empty_cache", None)):
                mod.empty_cache()

    def _prepare_ipc(self, state_dict: Mapping[str, torch.Tensor], version: int) -> SyncPayload:
        """Full buckets, flattened into device buffers whose IPC handles go in the payload; the
        buffers live until :meth:`release` (``push_weights`` calls it once workers applied)."""
        from torch.multiprocessing.reductions import reduce_tensor

        layout = self.layout(state_dict)
        bufs = self._ipc_bufs = [
                torch.empty(n, dtype=bits_dtype(torch_dtype(d)), device=self.device)
                for n, d in zip(layout.bucket_numels, layout.bucket_dtypes)]
        per_bucket: list[list[torch.Tensor]] = [[] for _ in bufs]
        for slot, t in zip(layout.slots, state_dict.values()):
            per_bucket[slot.bucket].append(t)
        for buf, group in zip(bufs, per_bucket):
            flatten(group, buf)
        torch.accelerator.synchronize(self.device)  # workers read on their own streams
        return SyncPayload(version=version, layout=layout, transport="ipc",
                           kinds=("full",) * len(bufs), buckets=[reduce_tensor(b) for b in bufs])


class IpcReceiverMixin:
    def _apply_ipc(self, p: SyncPayload) -> None:
        """Open each bucket's IPC handle on this process's index of the shared card and copy
        device to device. The handle names the sender's index; the card is the same."""
        index = torch.accelerator.current_device_index()
        try:
            for b, (rebuild, args) in enumerate(p.buckets):
                args = list(args)
                args[6] = index  # storage_device: this process's index of the shared card
                flat = rebuild(*args)
                if flat.numel() != p.layout.bucket_numels[b]:
                    raise WeightSyncError(f"sync v{p.version}: bucket {b} does not match the "
                                          "layout")
                for s in p.layout.bucket_slots(b):
                    self._copy(s, flat[s.offset: s.offset + s.numel])
                del flat
            torch.accelerator.synchronize()  # done reading before the sender reuses its buffers
        except BaseException as e:
            self._broken = f"sync v{p.version} failed: {e!r}"
            raise
