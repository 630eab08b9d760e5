"""What the three importers share: the refusal, the meta-device shape check, the progress bar."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tqdm import tqdm

DIFFUSERS_STEM = "diffusion_pytorch_model"  # diffusers' weight file names


class ImportRefused(ValueError):
    """The source is not what the importer expects; the message names the file and the keys."""


def meta_shapes(cls, cfg: dict) -> dict[str, tuple[int, ...]]:
    """The state-dict shapes of ``cls(**cfg)`` built on the meta device (no memory)."""
    with torch.device("meta"):
        model = cls(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_fits(got: dict, expected: dict, what: str) -> None:
    """Refuse, naming the keys, unless ``got`` has exactly ``expected``'s keys and shapes."""
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    bad = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    if missing or extra or bad:
        raise ImportRefused(f"{what}: missing {missing[:5]}, unexpected {extra[:5]}, shape "
                            f"mismatches {[(k, got[k], expected[k]) for k in bad[:3]]}")


def progress(tensors: Iterator[tuple[str, torch.Tensor]], count: int, desc: str):
    """A progress bar over the tensors on stderr: a 5B DiT takes minutes to write."""
    return tqdm(tensors, total=count, desc=desc, unit="tensor", mininterval=2.0, leave=False)
