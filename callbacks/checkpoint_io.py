"""Checkpoint writes that a crash cannot corrupt: write a temp file, then rename."""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from wmrl.io.atomic import atomic_path


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any = None) -> None:
        with atomic_path(path) as tmp:  # the old file stays valid until the rename
            torch.save(checkpoint, tmp)

    def load_checkpoint(self, path: Any, map_location: Any = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        where = map_location or "cpu"
        return torch.load(os.fspath(path), map_location=where, weights_only=True)
