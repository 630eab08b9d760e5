"""Random weights at a checkpoint's shapes, one tensor at a time (full-size synthetic
checkpoints: ``wmrl.pipeline.rlinf.synthetic``, ``wmrl.policies.openvla_oft.write_random_policy``).

N(0, 0.02) for matrices and other tensors, ones for norm scales (1-D ``weight``, ``gamma``),
zeros for 1-D biases, as the models' own initialisers roughly do: activations stay finite
through every block of a 30-layer DiT or a 32-layer Llama in bf16.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

STD = 0.02


def random_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype,
                  generator: torch.Generator) -> torch.Tensor:
    """One weight: ones for a norm scale (a 1-D ``weight``, any ``gamma``: Wan's VAE keeps
    them [C, 1, 1]), zeros for a 1-D bias, else N(0, 0.02)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "gamma" or (len(shape) == 1 and leaf == "weight"):
        return torch.ones(shape, dtype=dtype)
    if len(shape) == 1 and leaf == "bias":
        return torch.zeros(shape, dtype=dtype)
    return (torch.randn(shape, generator=generator) * STD).to(dtype)


def random_tensors(shapes: dict[str, tuple[int, ...]], dtype: torch.dtype,
                   seed: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, random tensor) in ``shapes``' order, one at a time."""
    g = torch.Generator().manual_seed(seed)
    for name, shape in shapes.items():
        yield name, random_tensor(name, shape, dtype, g)
