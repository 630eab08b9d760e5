"""Dtype names -> torch dtypes: the one table of every dtype a config names (a strategy's
``param_dtype`` / ``reduce_dtype``, and in wmrl ``policy.dtype``, ``env.world_model.dtype``,
``algorithm.optimizer_dtype``, an objective's ``timestep_dtype``, ...). Each dtype is spelled
as torch names it (``bfloat16``) or by its short alias (``bf16``); both mean the same."""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def to_dtype(value: str | torch.dtype, key: str) -> torch.dtype:
    """``value`` (a name of ``DTYPES`` or a torch dtype) as a torch dtype; a ValueError naming
    the config ``key`` and the names allowed otherwise."""
    if isinstance(value, torch.dtype):
        return value
    if value not in DTYPES:
        raise ValueError(f"{key}={value!r} is not allowed: one of {list(DTYPES)}")
    return DTYPES[value]


def dtype_name(value: str | torch.dtype, key: str = "dtype") -> str:
    """The torch name of a dtype (``"bf16"`` and ``torch.bfloat16`` -> ``"bfloat16"``): how a
    dtype is compared and written down (``str(torch.bfloat16)`` without ``torch.``)."""
    return str(to_dtype(value, key)).removeprefix("torch.")
