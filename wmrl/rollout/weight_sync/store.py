"""Transport ``cpu``: each bucket is one object in Ray's shared-memory object store.

A full bucket is put as a tuple of numpy views of the tensors: Ray's serializer writes them
back to back into one store object, so the bucket is flattened by the same single copy that
puts it. A worker's ``ray.get`` returns read-only views into shared memory and copies each
view straight into its parameter (no dict of tensors), or, with
``WeightReceiver(zero_copy=True)``, points its parameters at them.

The two halves are mixins of :class:`~wmrl.rollout.weight_sync.sender.WeightSender` and
:class:`~wmrl.rollout.weight_sync.receiver.WeightReceiver`, whose state they use.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import torch

from wmrl.rollout.weight_sync.types import (
    DeltaBucket,
    SyncPayload,
    WeightSyncError,
    bits_dtype,
    torch_dtype,
)


class StoreSenderMixin:
    def use_store(self) -> None:
        """Fall back to the Ray object store (e.g. the driver refused CUDA IPC)."""
        self.transport = "cpu"
        self.device = self._data_device = torch.device("cpu")
        self._last = None
        self.reset()

    def _to_store(self, entry: Any) -> Any:
        if isinstance(entry, list):  # full bucket as per-tensor raw-bit views
            arrays = tuple(
                t.detach().cpu().contiguous().reshape(-1).view(bits_dtype(t.dtype)).numpy()
                for t in entry
            )
            obj: Any = arrays
        elif isinstance(entry, DeltaBucket):
            obj = DeltaBucket(entry.indices.numpy(), entry.values.numpy())
        else:
            obj = entry.numpy()
        if not self.use_object_store:  # inline (same process): a snapshot, not live views
            return copy.deepcopy(obj)
        import ray

        return ray.put(obj)


class StoreReceiverMixin:
    def _apply_store(self, p: SyncPayload) -> None:
        import ray

        refs = [i for i, x in enumerate(p.buckets) if isinstance(x, ray.ObjectRef)]
        fetched = dict(zip(refs, ray.get([p.buckets[i] for i in refs]))) if refs else {}
        data = [fetched.get(i, x) for i, x in enumerate(p.buckets)]
        for b, entry in enumerate(data):  # validate everything before writing anything
            self._check_bucket(p, b, entry)
        try:
            with warnings.catch_warnings():  # views into the store are read-only: we only read
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                for b, entry in enumerate(data):
                    slots = p.layout.bucket_slots(b)
                    if isinstance(entry, DeltaBucket):
                        self._scatter(slots, torch.from_numpy(entry.indices),
                                      torch.from_numpy(entry.values))
                        continue
                    if isinstance(entry, np.ndarray):
                        entry = [entry[s.offset: s.offset + s.numel] for s in slots]
                    for s, arr in zip(slots, entry):
                        if self.zero_copy and not arr.flags.writeable:  # a store view
                            self._set(s.name, torch.from_numpy(arr).view(torch_dtype(s.dtype))
                                      .view(s.shape), aliased=True)
                        else:
                            self._copy(s, torch.from_numpy(arr))
        except BaseException as e:
            self._broken = f"sync v{p.version} failed: {e!r}"
            raise
        finally:
            del data, fetched  # release the shared-memory views so the store can free them

    def _check_bucket(self, p: SyncPayload, b: int, entry: Any) -> None:
        want = p.layout.bucket_numels[b]
        if isinstance(entry, DeltaBucket):
            ok = p.kinds[b] == "delta" and len(entry.indices) == len(entry.values)
            ok = ok and (len(entry.indices) == 0 or int(entry.indices[-1]) < want)
        elif isinstance(entry, np.ndarray):
            ok = p.kinds[b] == "full" and entry.size == want
        else:
            sizes = [a.size for a in entry]
            ok = p.kinds[b] == "full" and sizes == [s.numel for s in p.layout.bucket_slots(b)]
        if not ok:
            raise WeightSyncError(f"sync v{p.version}: bucket {b} does not match the layout")
