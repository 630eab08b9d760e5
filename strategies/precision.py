"""Mixed precision that autocasts on the device the strategy really runs on. Lightning's
accelerator connector builds ``MixedPrecision(..., device="cuda")`` for every accelerator
that is not CPU/MPS, so on NPU/MUSA nothing would be autocast."""

from __future__ import annotations

from typing import Literal

import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision


class DeviceMixedPrecision(MixedPrecision):
    """``MixedPrecision`` for an explicit ``device_type`` ("cuda", "npu", "musa", "cpu").

    "16-mixed" uses a ``torch.amp.GradScaler`` for that device; "bf16-mixed" needs none.
    """

    def __init__(
        self,
        precision: Literal["16-mixed", "bf16-mixed"] = "bf16-mixed",
        device_type: str = "cuda",
        scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise ValueError(
                f"DeviceMixedPrecision(precision={precision!r}): use '16-mixed' or 'bf16-mixed'."
            )
        if precision == "16-mixed" and scaler is None:
            scaler = torch.amp.GradScaler(device=device_type)
        super().__init__(precision, device_type, scaler)


def param_dtype_for_precision(precision: str | None) -> torch.dtype | None:
    """The dtype a Trainer ``precision`` computes in: ``bf16-mixed``/``bf16-true`` -> bfloat16,
    ``16-mixed``/``16-true`` -> float16, anything else (``32-true``, ``64-true``, None) -> None
    (keep the parameters' dtype)."""
    flag = str(precision) if precision is not None else ""
    if flag.startswith("bf16"):
        return torch.bfloat16
    if flag in ("16", "16-mixed", "16-true"):
        return torch.float16
    return None


def precision_for_device(plugin: Precision, device_type: str) -> Precision:
    """Return ``plugin`` unless it is a stock ``MixedPrecision`` aimed at another device type,
    in which case return an equivalent ``DeviceMixedPrecision`` for ``device_type``."""
    if not isinstance(plugin, MixedPrecision) or plugin.device == device_type:
        return plugin
    if device_type == "cpu" and plugin.precision == "16-mixed":
        raise ValueError("precision='16-mixed' is not supported on CPU; use 'bf16-mixed'.")
    return DeviceMixedPrecision(plugin.precision, device_type)
