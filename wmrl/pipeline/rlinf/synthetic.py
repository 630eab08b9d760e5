"""A release in RLinf's WoVR layout with random weights at any size: what
``scripts/full_size_check.py`` imports when the user has no release at hand (the published
shapes without the 13 GB download).

``<out>/model-0000i.safetensors`` the fork's DiT keys (``release_dit_shapes``), bf16, in
    shards of ``shard_bytes`` (the release has one file; the importer takes its shards alike,
    and a shard at a time keeps the writer's peak at about two shards);
``<out>/Wan2.2_VAE.pth`` the original Wan2.2 VAE keys (``release_vae_shapes``), float32, a
    flat state dict as the release stores it;
``<out>/dataset/traj{i}_kir.npy`` reset trajectories of per-frame dicts (``image`` uint8 HWC,
    ``delta_action`` [7], ``instruction``), each long enough to carry KIR context.

Values: ``wmrl.weights.random_weights`` (N(0, 0.02), norm scales one, biases zero).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from wmrl.io.atomic import atomic_dir
from wmrl.pipeline.rlinf.dit import release_dit_shapes
from wmrl.pipeline.rlinf.vae import release_vae_shapes
from wmrl.weights.random_weights import random_tensors
from wmrl.weights.safetensors_shards import write_sharded

TASKS = ("pick up the black bowl between the plate and the ramekin and place it on the plate",
         "pick up the black bowl on the stove and place it on the plate")


def dit_release_shapes(transformer: dict, action_dim: int = 7) -> dict[str, tuple[int, ...]]:
    """The release DiT's key table for a diffusers ``WanTransformer3DModel`` architecture
    (``env.world_model.transformer``)."""
    return release_dit_shapes(
        dim=int(transformer["num_attention_heads"]) * int(transformer["attention_head_dim"]),
        ffn=int(transformer["ffn_dim"]), channels=int(transformer["in_channels"]),
        freq_dim=int(transformer["freq_dim"]), layers=int(transformer["num_layers"]),
        action_dim=action_dim)


def write_release(out: str | Path, transformer: dict, vae: dict, height: int, width: int,
                  states: int = 2, frames: int = 6, seed: int = 0,
                  shard_bytes: int = 2 << 30) -> dict:
    """The release at ``out`` (written whole or not at all); returns what was written:
    ``dit`` (the shard paths), ``vae``, ``dataset``, parameter counts and bytes."""
    out = Path(out)
    dit_shapes = dit_release_shapes(transformer)
    vae_shapes = release_vae_shapes(vae)
    with atomic_dir(out, "rlinf_release") as tmp:
        dit_bytes, dit_files = write_sharded(
            tmp, random_tensors(dit_shapes, torch.bfloat16, seed), shard_bytes,
            of_total=False)
        (tmp / "model.safetensors.index.json").unlink(missing_ok=True)  # files are named
        torch.save(dict(random_tensors(vae_shapes, torch.float32, seed + 1)),
                   tmp / "Wan2.2_VAE.pth")
        rng = np.random.default_rng(seed)
        (tmp / "dataset").mkdir()
        for i in range(states):
            traj = np.empty(frames, dtype=object)
            for t in range(frames):
                traj[t] = {"image": rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
                           "delta_action": rng.uniform(-1, 1, 7).astype(np.float32),
                           "instruction": TASKS[i % len(TASKS)]}
            np.save(tmp / "dataset" / f"traj{i}_kir.npy", traj, allow_pickle=True)
    return {"dit": [str(out / f) for f in dit_files], "vae": str(out / "Wan2.2_VAE.pth"),
            "dataset": str(out / "dataset"),
            "dit_params": sum(math.prod(s) for s in dit_shapes.values()),
            "vae_params": sum(math.prod(s) for s in vae_shapes.values()),
            "dit_bytes": dit_bytes}
