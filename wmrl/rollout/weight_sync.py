"""Weight sync from the trainer to rollout workers: bucketed, versioned, optionally delta.

The sender groups the state dict by dtype into buckets of about ``bucket_mb`` and describes
them with a small picklable :class:`WeightLayout` (name, shape, dtype, bucket, element offset
of every tensor). Tensors travel as raw bits (bf16 as int16, fp32 as int32, ...), so any
dtype works - numpy has no bf16 - and a sync reconstructs the weights bit for bit.

Transports
  ``cpu``     each bucket is one object in Ray's shared-memory object store. A full bucket is
              put as a tuple of numpy views of the tensors: Ray's serializer writes them back
              to back into one store object, so the bucket is flattened by the same single
              copy that puts it. A worker's ``ray.get`` returns read-only views into shared
              memory and copies each view straight into its parameter (no dict of tensors),
              or, with ``WeightReceiver(zero_copy=True)``, points its parameters at them.
  ``gloo``    each bucket is flattened on the trainer and broadcast over the gloo backend of
              the trainer rank's :class:`~wmrl.rollout.sync_group.SyncGroup` with its
              policy actors (``RolloutDataModule`` builds it), or a torch.distributed group.
  ``ipc``     (chosen by the DataModule for ``device`` when the workers share the trainer's
              card, i.e. collocated): each bucket is flattened into a device buffer whose
              CUDA IPC handle is sent; a worker opens it and copies device to device, nothing
              goes through the host; the buffers are freed after the sync. CUDA/ROCm only;
              elsewhere, or when the driver refuses IPC, the DataModule falls back to the
              object store.
  ``device``  the same collective code on the accelerator (NCCL/RCCL/HCCL/MCCL group): fails
              at construction when the process has no accelerator. A worker that rejects a
              sync still receives (and drops) its broadcasts, so the trainer never hangs.

Delta (``delta=True``): per bucket the sender keeps the last bits it sent and ships only
``indices = {i : new_i != last_i}`` and ``values = new[indices]`` (bitwise comparison, so
NaN and -0.0 are exact); a bucket falls back to full when
``count * (index_bytes + elem_bytes) >= max_delta_fraction * numel * elem_bytes``.

Versions: every sync carries ``version``; a worker checks the whole payload against the
layout before touching a parameter, applies all buckets, then sets its version in one
assignment, under a lock that :meth:`WeightReceiver.reading` also holds while sampling, so a
sample never mixes two versions. A delta applies only on top of its ``base_version``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wmrl.rollout.sync_group import broadcast

TRANSPORTS = ("cpu", "gloo", "device")  # what a user configures; "ipc" is chosen by the caller
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class WeightSyncError(RuntimeError):
    """A sync that cannot be applied: wrong layout, missing bucket, wrong base version."""


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise WeightSyncError(f"unknown dtype {name!r} in the weight layout")
    return dt


def _bits_dtype(dtype: torch.dtype) -> torch.dtype:
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
            _bits_dtype(t.dtype)
            b = open_bucket.get(t.dtype)
            size = t.element_size()
            if b is None or (numels[b] > 0 and (numels[b] + t.numel()) * size > limit):
                b = len(numels)
                open_bucket[t.dtype] = b
                dtypes.append(str(t.dtype).removeprefix("torch."))
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
            n * _dtype(d).itemsize for n, d in zip(self.bucket_numels, self.bucket_dtypes)
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


_SCAN_CHUNK = 1 << 20  # elements compared at a time by the delta scan


def _changed(new: Any, old: Any, mask: np.ndarray | None) -> Any:
    """Positions where the raw bits differ: numpy arrays (``mask`` is scratch) or tensors."""
    if isinstance(new, np.ndarray):
        return np.flatnonzero(np.not_equal(new, old, out=mask[: new.shape[0]]))
    return torch.ne(new, old).nonzero().reshape(-1)


def _bits_of(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` flattened as raw bits of ``like``'s integer dtype, on ``like``'s device."""
    return t.detach().reshape(-1).view(like.dtype).to(like.device)


class WeightSender:
    """Trainer side. ``prepare(state_dict, version)`` -> :class:`SyncPayload`; for collective
    transports call ``send(payload)`` while the workers run ``apply``."""

    def __init__(
        self,
        bucket_mb: float = 256.0,
        delta: bool = False,
        transport: str = "cpu",
        max_delta_fraction: float = 0.5,
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
        self.device = _collective_device(transport)
        self._data_device = torch.device("cpu") if transport == "cpu" else self.device
        self._layout: WeightLayout | None = None
        self._layout_key: tuple | None = None
        self._last: list[torch.Tensor] | None = None  # delta: bits the workers hold
        self._last_version: int | None = None
        self._pending: tuple[int, list] | None = None  # collective: data waiting for send()

    def use_group(self, group: Any, device: torch.device | str | None = None) -> None:
        """Send over ``group`` (e.g. a :class:`~wmrl.rollout.sync_group.SyncGroup`), staging
        device-transport buckets on ``device`` (the trainer rank's; default: current)."""
        self.group = group
        if self.transport == "device" and device is not None:
            self.device = self._data_device = torch.device(device)
            self._last = None  # delta bits live on the staging device
            self._buf = None
            self.reset()

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

    def use_store(self) -> None:
        """Fall back to the Ray object store (e.g. the driver refused CUDA IPC)."""
        self.transport = "cpu"
        self.device = self._data_device = torch.device("cpu")
        self._last = None
        self.reset()

    def _prepare_ipc(self, state_dict: Mapping[str, torch.Tensor], version: int) -> SyncPayload:
        """Full buckets, flattened into device buffers whose IPC handles go in the payload; the
        buffers live until :meth:`release` (``push_weights`` calls it once workers applied)."""
        from torch.multiprocessing.reductions import reduce_tensor

        layout = self.layout(state_dict)
        bufs = self._ipc_bufs = [
                torch.empty(n, dtype=_bits_dtype(_dtype(d)), device=self.device)
                for n, d in zip(layout.bucket_numels, layout.bucket_dtypes)]
        per_bucket: list[list[torch.Tensor]] = [[] for _ in bufs]
        for slot, t in zip(layout.slots, state_dict.values()):
            per_bucket[slot.bucket].append(t)
        for buf, group in zip(bufs, per_bucket):
            torch.cat([_bits_of(t, buf) for t in group], out=buf)
        torch.accelerator.synchronize(self.device)  # workers read on their own streams
        return SyncPayload(version=version, layout=layout, transport="ipc",
                           kinds=("full",) * len(bufs), buckets=[reduce_tensor(b) for b in bufs])

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
                torch.empty(n, dtype=_bits_dtype(_dtype(d)), device=self._data_device)
                for n, d in zip(layout.bucket_numels, layout.bucket_dtypes)
            ]
        kinds, data, counts = [], [], []
        for b, group in enumerate(per_bucket):
            entry: Any = group  # full: flattened later, by Ray's put or by cat before send
            if self.delta:
                entry = self._delta(b, group) if base is not None else None
                if entry is None:  # first sync or dense change: full, from the new bits
                    last = self._last[b]
                    torch.cat([_bits_of(t, last) for t in group], out=last)
                    entry = last
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

    def _delta(self, b: int, group: list[torch.Tensor]) -> DeltaBucket | None:
        """Changed elements of bucket ``b`` against the last sent bits (then updates them);
        None when the delta would not be smaller than ``max_delta_fraction`` of the bucket.
        Scans in chunks so no bucket-sized temporary is allocated; on CPU with numpy, whose
        compare + flatnonzero is ~10x faster here than torch's ne + nonzero."""
        last = self._last[b]
        elem = last.element_size()
        idx_dtype = torch.int32 if last.numel() < 2**31 else torch.int64
        budget = self.max_delta_fraction * last.numel() * elem / (idx_dtype.itemsize + elem)
        cpu = last.device.type == "cpu"
        old_all = last.numpy() if cpu else last
        mask = np.empty(_SCAN_CHUNK, dtype=bool) if cpu else None
        idx_parts, val_parts, count, offset = [], [], 0, 0
        for t in group:
            new = _bits_of(t, last)
            new = new.numpy() if cpu else new
            for a in range(0, new.shape[0], _SCAN_CHUNK):
                chunk = new[a: a + _SCAN_CHUNK]
                old = old_all[offset + a: offset + a + chunk.shape[0]]
                i = _changed(chunk, old, mask)
                if i.shape[0]:
                    count += i.shape[0]
                    if count >= budget:
                        return None
                    idx_parts.append(i + (offset + a))
                    val_parts.append(chunk[i])
            offset += new.shape[0]
        if not idx_parts:
            empty = torch.empty(0, dtype=idx_dtype, device=last.device)
            return DeltaBucket(empty, last[:0].clone())
        cat: Any = np.concatenate if cpu else torch.cat
        idx, vals = cat(idx_parts), cat(val_parts)
        old_all[idx] = vals
        if cpu:
            idx, vals = torch.from_numpy(idx), torch.from_numpy(vals)
        return DeltaBucket(idx.to(idx_dtype), vals)

    def _to_store(self, entry: Any) -> Any:
        if isinstance(entry, list):  # full bucket as per-tensor raw-bit views
            arrays = tuple(
                t.detach().cpu().contiguous().reshape(-1).view(_bits_dtype(t.dtype)).numpy()
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
                bits = _bits_dtype(_dtype(payload.layout.bucket_dtypes[b]))
                nbytes = payload.layout.bucket_numels[b] * bits.itemsize
                buf = self._send_buffer(nbytes).view(bits)
                torch.cat([_bits_of(t, buf) for t in entry], out=buf)
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


def _collective_device(transport: str) -> torch.device:
    if transport != "device":
        return torch.device("cpu")
    acc = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    if acc is None:
        raise WeightSyncError(
            "weight_sync.transport='device' needs an accelerator (CUDA/ROCm/NPU/MUSA) in this "
            "process and none is available; use transport='cpu' (Ray object store) or 'gloo'"
        )
    return torch.device(acc.type, torch.accelerator.current_device_index())


class WeightReceiver:
    """Worker side: ``apply(payload) -> version``. ``module`` is an nn.Module or a mapping
    name -> tensor whose storage is the live weights (e.g. ``module.state_dict()``).

    ``zero_copy=True`` (cpu transport, CPU weights, an nn.Module): instead of copying, the
    module's parameters and buffers are re-pointed at the read-only views into Ray's shared
    memory (``param.data = view``), so applying a sync moves no bytes and every worker on a
    node shares one copy of the weights. Only for inference workers: an in-place write to
    such a weight would change the shared object. A delta first gives the touched tensors
    a private copy."""

    def __init__(self, module: torch.nn.Module | Mapping[str, torch.Tensor], version: int = -1,
                 group: Any = None, zero_copy: bool = False):
        self.module = module if isinstance(module, torch.nn.Module) else None
        sd = module.state_dict() if self.module is not None else module
        self.targets: dict[str, torch.Tensor] = dict(sd)
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
        self.targets = dict(self.module.state_dict())
        self.aliased = {n for n in self.aliased
                        if self.targets[n].data_ptr() == self._alias_ptr.get(n)}

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
                if tuple(t.shape) != s.shape or str(t.dtype).removeprefix("torch.") != s.dtype:
                    raise WeightSyncError(
                        f"{s.name}: sync sends {s.dtype}{list(s.shape)}, worker has "
                        f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
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
                            self._set(s.name, torch.from_numpy(arr).view(_dtype(s.dtype))
                                      .view(s.shape), aliased=True)
                        else:
                            self._copy(s, torch.from_numpy(arr))
        except BaseException as e:
            self._broken = f"sync v{p.version} failed: {e!r}"
            raise
        finally:
            del data, fetched  # release the shared-memory views so the store can free them

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
        ends = torch.tensor([s.offset + s.numel for s in slots], dtype=idx.dtype)
        cuts = torch.searchsorted(idx.cpu(), ends).tolist()
        start = 0
        for s, stop in zip(slots, cuts):
            if stop > start:
                if s.name in self.aliased:
                    self._set(s.name, self.targets[s.name].clone(), aliased=False)
                t = self.targets[s.name]
                if not t.is_contiguous():
                    raise WeightSyncError(f"{s.name}: delta sync needs a contiguous tensor")
                local = (idx[start:stop].long() - s.offset).to(t.device)
                t.view(-1).view(vals.dtype)[local] = vals[start:stop].to(t.device)
            start = stop

    def _apply_collective(self, p: SyncPayload, drain: bool = False) -> None:
        """Receive every broadcast of ``p`` in order; ``drain``: receive and discard."""
        device = _collective_device(p.transport)
        try:
            for b, numel in enumerate(p.layout.bucket_numels):
                bits = _bits_dtype(_dtype(p.layout.bucket_dtypes[b]))
                slots = p.layout.bucket_slots(b)
                if p.kinds[b] == "delta":
                    n = p.delta_counts[b]
                    idx_dtype = torch.int32 if numel < 2**31 else torch.int64
                    idx = torch.empty(n, dtype=idx_dtype, device=device)
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

