"""Read a ``HybridShardStrategy`` checkpoint into plain, full CPU tensors in one process: no
process group, no accelerator, no model code.

``HybridShardStrategy.save_checkpoint`` writes either one file (``save_distributed_checkpoint=
False``) or a DCP folder: ``.metadata`` + ``*.distcp`` shards holding ``{"state_dict": ...,
"optimizer_0": ..., ...}`` and ``meta.pt`` with the rest (epoch, global step, callbacks, ...).
Both are read here with public torch APIs (``FileSystemReader.read_metadata`` and
``torch.distributed.checkpoint.load(..., no_dist=True)``).
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from lightning.fabric.utilities.load import _METADATA_FILENAME
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

__all__ = ["full_state_dict", "load_full_checkpoint", "load_full_state_dict"]


def full_state_dict(module: torch.nn.Module,
                    keep: Callable[[str], bool] | None = None) -> dict[str, torch.Tensor]:
    """The module's state dict with full (unsharded) tensors: FSDP2's DTensor shards are
    all-gathered (a collective: every rank of the mesh must call it). ``keep(name)``: only
    those entries (the others are not gathered)."""
    out = {}
    for name, value in module.state_dict().items():
        if keep is None or keep(name):
            out[name] = value.full_tensor() if hasattr(value, "full_tensor") else value
    return out


def load_full_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The LightningModule's full ``state_dict`` (keys as ``module.state_dict()``, full CPU
    tensors) from a checkpoint folder (DCP) or file written by ``HybridShardStrategy``; only the
    model's tensors are read, not the optimizer's."""
    return load_full_checkpoint(path, include=("state_dict",))["state_dict"]


def load_full_checkpoint(
    path: str | os.PathLike, include: Iterable[str] | None = None
) -> dict[str, Any]:
    """The whole checkpoint as Lightning holds it in memory: ``state_dict`` (full tensors),
    ``optimizer_states`` (a list, one per optimizer, with full state tensors keyed by parameter
    name) and the entries of ``meta.pt`` (``epoch``, ``global_step``, ...).

    ``include``: for a DCP folder, read only these top-level entries (``"state_dict"``,
    ``"optimizer_0"``, ...) and skip ``meta.pt``; a single file is always read whole. Loads
    pickled objects (``weights_only=True``): only read checkpoints you trust."""
    path = Path(path)
    if path.is_file():
        return torch.load(path, map_location="cpu", weights_only=True)
    if not (path / ".metadata").is_file():
        raise FileNotFoundError(f"{path} is neither a checkpoint file nor a DCP folder (.metadata).")
    wanted = None if include is None else set(include)
    reader = dcp.FileSystemReader(path)
    metadata = reader.read_metadata()
    planner_data = metadata.planner_data or {}
    flat: dict[str, Any] = {}
    key_paths: dict[str, tuple] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        key_path = tuple(planner_data.get(fqn) or fqn.split(".", 1))
        if wanted is not None and key_path[0] not in wanted:
            continue
        key_paths[fqn] = key_path
        # tensors are allocated full size; pickled objects (bytes entries) are filled by load
        flat[fqn] = (
            torch.empty(md.size, dtype=md.properties.dtype)
            if isinstance(md, TensorStorageMetadata)
            else None
        )
    if wanted is not None and not flat:
        raise KeyError(f"{path} holds none of {sorted(wanted)}.")
    planner = _FlatLoadPlanner()
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.filterwarnings("ignore", message=".*load in a single process")
        dcp.load(flat, storage_reader=reader, planner=planner, no_dist=True)
    flat.update(planner.objects)
    out: dict[str, Any] = {}
    for fqn, value in flat.items():
        _set(out, key_paths[fqn], value)
    optimizers = sorted(
        (k for k in out if k.startswith("optimizer_") and k[len("optimizer_"):].isdigit()),
        key=lambda k: int(k[len("optimizer_"):]),
    )
    if optimizers:
        out["optimizer_states"] = [out.pop(k) for k in optimizers]
    if wanted is None and (path / _METADATA_FILENAME).is_file():
        out.update(torch.load(path / _METADATA_FILENAME, map_location="cpu", weights_only=True))
    return out


class _FlatLoadPlanner(dcp.DefaultLoadPlanner):
    """Load a flat ``{fqn: tensor | None}`` dict as is: tensors in place, pickled objects (the
    ``None`` placeholders) collected in ``objects``."""

    def __init__(self) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self.objects: dict[str, Any] = {}

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        self.objects[read_item.dest_index.fqn] = torch.load(value, weights_only=True)


def _set(root: dict, key_path: tuple, value: Any) -> None:
    """``root[k0][k1]...[kn] = value``, creating dicts (or lists for int keys) on the way."""
    node: Any = root
    for key, nxt in zip(key_path[:-1], key_path[1:]):
        empty: Any = [] if isinstance(nxt, int) else {}
        if isinstance(node, list):
            node.extend([None] * (key + 1 - len(node)))
            if node[key] is None:
                node[key] = empty
        else:
            node.setdefault(key, empty)
        node = node[key]
    last = key_path[-1]
    if isinstance(node, list):
        node.extend([None] * (last + 1 - len(node)))
    node[last] = value
