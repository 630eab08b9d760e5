"""Device-family facts: which vendor module a device type needs, its collective backend, its
visible-device variables, a device count that survives broken management bindings, the
process-group string with an explicit CPU backend, and a staggered first device touch.

Nothing here writes a visible-device variable: restricting cards inside a running process
maps to the wrong physical card on some stacks (MUSA); restrict them at the container level.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from dataclasses import dataclass
from types import ModuleType

import torch


@dataclass(frozen=True)
class DeviceFamily:
    """What torch needs to drive one device type."""

    device_type: str  # torch.device type: "cuda", "npu", "musa"
    vendor_module: str | None  # imported to register torch.<device_type>; None for stock torch
    backend: str  # collective backend for device tensors
    visible_env: tuple[str, ...]  # variables that restrict the visible cards (read, never written)


FAMILIES: dict[str, DeviceFamily] = {
    "cuda": DeviceFamily(
        "cuda", None, "nccl", ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    ),
    "npu": DeviceFamily("npu", "torch_npu", "hccl", ("ASCEND_RT_VISIBLE_DEVICES",)),
    "musa": DeviceFamily(
        "musa", "torch_musa", "mccl", ("MUSA_VISIBLE_DEVICES", "MTHREADS_VISIBLE_DEVICES")
    ),
    "xpu": DeviceFamily("xpu", None, "xccl", ("ONEAPI_DEVICE_SELECTOR", "ZE_AFFINITY_MASK")),
}

# Visible-device variables as the process started; compared later to catch in-process rewrites.
_VISIBLE_AT_IMPORT = {
    name: os.environ.get(name) for fam in FAMILIES.values() for name in fam.visible_env
}


def family(device_type: str) -> DeviceFamily:
    if device_type not in FAMILIES:
        raise ValueError(
            f"Unknown device type {device_type!r}; expected one of {sorted(FAMILIES)} (or 'cpu')."
        )
    return FAMILIES[device_type]


def import_vendor(device_type: str) -> ModuleType | None:
    """Import the vendor extension (``torch_npu`` / ``torch_musa``) that registers
    ``torch.<device_type>``. ``torch_musa`` patches DeviceMesh/FSDP2/DTensor on import, so this
    must run before any mesh is built. Returns None for stock device types."""
    if device_type == "cpu":
        return None
    fam = family(device_type)
    if fam.vendor_module is None:
        return None
    try:
        return importlib.import_module(fam.vendor_module)
    except ImportError as err:
        raise ImportError(
            f"Device type {device_type!r} needs the vendor package {fam.vendor_module!r}, which is "
            f"not importable ({err}). Install the vendor's torch extension matching torch "
            f"{torch.__version__}."
        ) from err


def device_module(device_type: str) -> ModuleType:
    """``torch.cuda`` / ``torch.npu`` / ``torch.musa`` (importing the vendor extension first)."""
    import_vendor(device_type)
    mod = getattr(torch, device_type, None)
    if mod is None:
        raise RuntimeError(
            f"torch.{device_type} is missing after importing the vendor package; the extension "
            f"did not register the {device_type!r} device."
        )
    return mod


def is_rocm() -> bool:
    """ROCm builds report device type "cuda" and map nccl to RCCL; only ``torch.version.hip``
    tells them apart."""
    return getattr(torch.version, "hip", None) is not None


def _management_count(device_type: str) -> int | None:
    """Card count from the vendor management library, or None when it is absent or broken
    (the PyPI ``pymtml`` is an unrelated demo package that reports 0 devices)."""
    if device_type != "musa":
        return None
    try:
        pymtml = importlib.import_module("pymtml")
        pymtml.mtmlLibraryInit()
        count = int(pymtml.mtmlLibraryCountDevice())
    except Exception:  # noqa: BLE001 - any failure means "binding unusable"
        return None
    return count if count > 0 else None


def device_count(device_type: str) -> int:
    """Number of usable devices of this type; 0 when the stack is not installed. The runtime's
    own count is the authority; the management library is only a fallback when the runtime
    cannot answer."""
    if device_type == "cpu":
        return 1
    try:
        mod = device_module(device_type)
    except (ImportError, RuntimeError):
        return _management_count(device_type) or 0
    try:
        return int(mod.device_count())
    except Exception:  # noqa: BLE001 - a runtime that cannot count means none usable
        return _management_count(device_type) or 0


def detect_device_type() -> str:
    """The first device family with devices: npu, musa, cuda (incl. ROCm), else cpu. Vendor
    stacks are probed only when their package is installed."""
    for dev in ("npu", "musa"):
        if importlib.util.find_spec(FAMILIES[dev].vendor_module) is not None and device_count(dev):
            return dev
    return "cuda" if torch.cuda.is_available() else "cpu"


def process_group_backend(device_type: str) -> str:
    """``"gloo"`` on CPU, else ``"cpu:gloo,<type>:<backend>"``: sharded checkpoints and CPU
    (offloaded) tensors need gloo beside the device backend."""
    if device_type == "cpu":
        return "gloo"
    return f"cpu:gloo,{device_type}:{family(device_type).backend}"


def visible_devices(device_type: str) -> dict[str, str]:
    """The visible-device variables that are set for this family (read only)."""
    if device_type == "cpu":
        return {}
    return {k: os.environ[k] for k in family(device_type).visible_env if k in os.environ}


def visible_ids(device_type: str, env: dict | None = None) -> list[str] | None:
    """The card ids this process may see, from the first visible-device variable that is set
    (e.g. ``CUDA_VISIBLE_DEVICES=4,5`` -> ``["4", "5"]``); None when no variable restricts
    them. Read only."""
    if device_type == "cpu":
        return None
    env = os.environ if env is None else env
    for name in family(device_type).visible_env:
        if env.get(name) is not None:
            value = env[name].rpartition(":")[2]  # ONEAPI_DEVICE_SELECTOR=level_zero:0,1
            return [x.strip() for x in value.split(",") if x.strip()]
    return None


def physical_id(device_type: str, index: int, env: dict | None = None) -> str:
    """The id of this process's device ``index`` as the machine names it (the entry of the
    visible-device list, or the index itself when no list restricts the cards): what another
    process on the node needs to find the same card."""
    ids = visible_ids(device_type, env)
    if ids is None:
        return str(index)
    if not 0 <= index < len(ids):
        raise RuntimeError(f"{device_type}:{index} is not visible here ({ids})")
    return ids[index]


def local_index(device_type: str, card: str, env: dict | None = None) -> int:
    """This process's index of the machine's card ``card`` (a physical id): its position in
    the visible-device list, or the id itself when no list restricts the cards. Raises when
    the list hides the card: restrict devices at the launcher, never by rewriting the list."""
    ids = visible_ids(device_type, env)
    if ids is None:
        return int(card)
    if card not in ids:
        var = next(n for n in family(device_type).visible_env if (env or os.environ).get(n))
        raise RuntimeError(
            f"{device_type} card {card} is not visible in this process ({var}={','.join(ids)}); "
            f"the scheduler must leave it visible (for a Ray actor that shares the trainer's "
            f"card: RAY_EXPERIMENTAL_NOSET_{var}=1 in its runtime_env)"
        )
    return ids.index(card)


def check_visible_devices_unchanged(device_type: str) -> None:
    """Raise when a visible-device variable changed after this process imported strategies:
    rewriting it in-process selects the wrong physical card on some stacks."""
    if device_type == "cpu":
        return
    for name in family(device_type).visible_env:
        if os.environ.get(name) != _VISIBLE_AT_IMPORT.get(name):
            raise RuntimeError(
                f"{name} changed inside this process ({_VISIBLE_AT_IMPORT.get(name)!r} -> "
                f"{os.environ.get(name)!r}). Restrict devices before the process starts (container "
                f"or launcher level), not from Python."
            )


def stagger_first_touch(local_rank: int, seconds: float) -> float:
    """Sleep ``local_rank * seconds`` before the first driver call: many processes initialising
    the driver at once can hang some stacks. Returns the seconds slept."""
    delay = max(0.0, float(seconds)) * max(0, int(local_rank))
    if delay:
        time.sleep(delay)
    return delay


def describe(device_type: str | None = None) -> dict:
    """A small report of the device stack for logs."""
    dev = device_type or detect_device_type()
    info = {"device_type": dev, "torch": torch.__version__, "count": device_count(dev)}
    if dev == "cuda":
        info["rocm"] = is_rocm()
        info["hip"] = getattr(torch.version, "hip", None)
        info["backend"] = "rccl" if is_rocm() else "nccl"
    elif dev != "cpu":
        info["backend"] = family(dev).backend
    info["visible"] = visible_devices(dev)
    return info
