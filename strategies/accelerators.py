"""Lightning accelerators for Ascend NPU and Moore Threads MUSA, registered in Lightning's
``AcceleratorRegistry`` as ``"npu"`` and ``"musa"`` (ROCm runs through Lightning's CUDA
accelerator; see ``devices.is_rocm``)."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry

from strategies import devices


def _parse_device_ids(devices_flag: Any, available: int, name: str) -> list[int]:
    """``int`` n -> first n ids, ``-1``/``"auto"`` -> all, ``"0,2"`` or a list -> those ids."""
    if isinstance(devices_flag, str):
        flag = devices_flag.strip()
        if flag in ("auto", "-1"):
            devices_flag = -1
        elif "," in flag:
            devices_flag = [int(x) for x in flag.split(",") if x.strip()]
        else:
            devices_flag = int(flag)
    if isinstance(devices_flag, int):
        ids = list(range(available)) if devices_flag == -1 else list(range(devices_flag))
    else:
        ids = [int(x) for x in devices_flag]
    if not ids or max(ids) >= available:
        raise ValueError(
            f"Trainer(devices={devices_flag!r}) asks for {name} ids {ids}, but {available} "
            f"{name} device(s) are visible. Lower `devices` or check the visible-device variables "
            f"{devices.family(name).visible_env} (set them before the process starts)."
        )
    return ids


class _VendorAccelerator(Accelerator):
    """Shared logic; subclasses set ``device_type``."""

    device_type = ""

    def setup_device(self, device: torch.device) -> None:
        if device.type != self.device_type:
            raise ValueError(f"{type(self).__name__} got device {device}, expected {self.device_type}")
        devices.check_visible_devices_unchanged(self.device_type)
        devices.device_module(self.device_type).set_device(device)

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        mod = devices.device_module(self.device_type)
        stats = getattr(mod, "memory_stats", None)
        return dict(stats(device)) if callable(stats) else {}

    def teardown(self) -> None:
        mod = getattr(torch, self.device_type, None)
        if mod is not None and callable(getattr(mod, "empty_cache", None)):
            mod.empty_cache()

    @classmethod
    def parse_devices(cls, devices_flag: Any) -> list[int]:
        return _parse_device_ids(devices_flag, cls.auto_device_count(), cls.device_type)

    @classmethod
    def get_parallel_devices(cls, devices_flag: Any) -> list[torch.device]:
        ids = devices_flag if isinstance(devices_flag, list) else cls.parse_devices(devices_flag)
        return [torch.device(cls.device_type, i) for i in ids]

    @classmethod
    def auto_device_count(cls) -> int:
        return devices.device_count(cls.device_type)

    @classmethod
    def is_available(cls) -> bool:
        return devices.device_count(cls.device_type) > 0

    @classmethod
    def name(cls) -> str:
        return cls.device_type

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register(
            cls.device_type, cls, description=f"{cls.__name__} ({cls.device_type})", override=True
        )


class NPUAccelerator(_VendorAccelerator):
    """Ascend NPU through ``torch_npu`` (backend hccl, ``ASCEND_RT_VISIBLE_DEVICES``)."""

    device_type = "npu"


class MUSAAccelerator(_VendorAccelerator):
    """Moore Threads GPU through ``torch_musa`` (backend mccl, ``MUSA_VISIBLE_DEVICES``; the
    container-level ``MTHREADS_VISIBLE_DEVICES`` is respected, never rewritten)."""

    device_type = "musa"


def register_accelerators() -> None:
    """Make ``Trainer(accelerator="npu" | "musa")`` resolve to these classes (idempotent)."""
    for cls in (NPUAccelerator, MUSAAccelerator):
        if cls.device_type not in AcceleratorRegistry:
            cls.register_accelerators(AcceleratorRegistry)


register_accelerators()  # loading this module (Lightning is loaded by then) registers them
