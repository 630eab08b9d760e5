"""A bucket as raw bits, full or delta.

Full: the bucket's tensors back to back as the same-width integer dtype (bf16 as int16, fp32
as int32, ...), so any dtype travels and arrives bit for bit - numpy has no bf16.

Delta: the sender keeps the last bits it sent and ships only
``indices = {i : new_i != last_i}`` and ``values = new[indices]`` (bitwise comparison, so NaN
and -0.0 are exact); a bucket falls back to full when
``count * (index_bytes + elem_bytes) >= max_delta_fraction * numel * elem_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from wmrl.rollout.weight_sync.types import DeltaBucket, TensorSlot

SCAN_CHUNK = 1 << 20  # elements compared at a time by the delta scan


def index_dtype(numel: int) -> torch.dtype:
    """The dtype of a delta's indices into a bucket of ``numel`` elements (both sides agree)."""
    return torch.int32 if numel < 2**31 else torch.int64


def bits_of(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` flattened as raw bits of ``like``'s integer dtype, on ``like``'s device."""
    return t.detach().reshape(-1).view(like.dtype).to(like.device)


def flatten(group: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """A full bucket: the raw bits of ``group``'s tensors back to back, written into ``out``."""
    torch.cat([bits_of(t, out) for t in group], out=out)
    return out


def changed(new: Any, old: Any, mask: np.ndarray | None) -> Any:
    """Positions where the raw bits differ: numpy arrays (``mask`` is scratch) or tensors."""
    if isinstance(new, np.ndarray):
        return np.flatnonzero(np.not_equal(new, old, out=mask[: new.shape[0]]))
    return torch.ne(new, old).nonzero().reshape(-1)


def encode_delta(last: torch.Tensor, group: list[torch.Tensor],
                 max_delta_fraction: float) -> DeltaBucket | None:
    """Changed elements of a bucket's tensors ``group`` against ``last``, the bits the workers
    hold (then updates them); None when the delta would not be smaller than
    ``max_delta_fraction`` of the bucket. Scans in chunks so no bucket-sized temporary is
    allocated; on CPU with numpy, whose compare + flatnonzero is ~10x faster here than
    torch's ne + nonzero."""
    elem = last.element_size()
    idx_dtype = index_dtype(last.numel())
    budget = max_delta_fraction * last.numel() * elem / (idx_dtype.itemsize + elem)
    cpu = last.device.type == "cpu"
    old_all = last.numpy() if cpu else last
    mask = np.empty(SCAN_CHUNK, dtype=bool) if cpu else None
    idx_parts, val_parts, count, offset = [], [], 0, 0
    for t in group:
        new = bits_of(t, last)
        new = new.numpy() if cpu else new
        for a in range(0, new.shape[0], SCAN_CHUNK):
            chunk = new[a: a + SCAN_CHUNK]
            old = old_all[offset + a: offset + a + chunk.shape[0]]
            i = changed(chunk, old, mask)
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


def delta_runs(slots: list[TensorSlot], idx: torch.Tensor) -> Iterator[tuple[TensorSlot, int, int]]:
    """Decode a delta's sorted bucket ``idx``: (slot, start, stop) for every slot that changed,
    ``idx[start:stop] - slot.offset`` being its changed elements."""
    ends = torch.tensor([s.offset + s.numel for s in slots], dtype=idx.dtype)
    cuts = torch.searchsorted(idx.cpu(), ends).tolist()
    start = 0
    for s, stop in zip(slots, cuts):
        if stop > start:
            yield s, start, stop
        start = stop
