"""Sharded safetensors as transformers and diffusers read them: shard files of at most
``max_shard_bytes`` and ``<stem>.safetensors.index.json``,
``{"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file}}``.

The one writer of the project: the policy's ``save_pretrained`` (transformers' names) and the
RLinf importer (``wmrl.pipeline.rlinf``, diffusers' folders) both call
:func:`write_sharded`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file

INDEX_NAME = "model.safetensors.index.json"  # transformers' index beside model-*.safetensors


def _shards(items: Iterable[tuple[str, torch.Tensor]],
            max_shard_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive tensors, a shard closed before the tensor that would push it over
    ``max_shard_bytes`` (a tensor bigger than that gets a shard of its own)."""
    shard, size = {}, 0
    for name, t in items:
        if shard and size + t.numel() * t.element_size() > max_shard_bytes:
            yield shard
            shard, size = {}, 0
        shard[name] = t.contiguous()
        size += t.numel() * t.element_size()
    if shard:
        yield shard


def write_sharded(folder: str | Path, tensors: Iterable[tuple[str, torch.Tensor]],
                  max_shard_bytes: int, stem: str = "model",
                  of_total: bool = True) -> tuple[int, list[str]]:
    """Write ``tensors`` (name, CPU tensor), in order, into shards and their index in
    ``folder``; returns (bytes of tensor data, shard file names).

    Each shard is written once full and then dropped, so with a lazy ``tensors`` the peak
    memory is about one shard; the files are named once their count is known.
    ``of_total`` (transformers): ``<stem>-00001-of-00002.safetensors``, ... and always the
    index. Otherwise (diffusers, as the importer writes it): ``<stem>-00001.safetensors``, ...
    with the index, or one ``<stem>.safetensors`` and no index when everything fits one shard.
    """
    folder = Path(folder)
    weight_map: dict[str, str] = {}
    written, total = [], 0
    for i, shard in enumerate(_shards(tensors, max_shard_bytes)):
        fname = f"{stem}-{i + 1:05d}.safetensors"
        save_file(shard, str(folder / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
        total += sum(t.numel() * t.element_size() for t in shard.values())
        written.append(fname)
    n = len(written)
    if of_total:
        names = [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    else:
        names = [f"{stem}.safetensors"] if n == 1 else written
    for old, new in zip(written, names):
        if old != new:
            (folder / old).replace(folder / new)
    if of_total or n != 1:
        final = dict(zip(written, names))
        index = {"metadata": {"total_size": total},
                 "weight_map": {k: final[v] for k, v in weight_map.items()}}
        (folder / f"{stem}.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return total, names
