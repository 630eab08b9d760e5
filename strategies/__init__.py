"""Lightning strategies and accelerators for any Lightning project (torch + lightning only).

- ``HybridShardStrategy``: FSDP2 on a ("replicate", "shard") mesh, CPU/CUDA/ROCm/NPU/MUSA;
  ``param_dtype=None`` (default) computes in the Trainer's precision; registered as
  ``strategy="hybrid_shard"``.
- ``load_full_state_dict(path)``: a checkpoint written by ``HybridShardStrategy`` (sharded DCP
  folder or one file) as a plain ``{name: full CPU tensor}`` dict, in one process without a
  process group; ``load_full_checkpoint(path)`` adds the optimizer states and Lightning's meta.
- ``offload`` / ``onload``: move a role's weights, grads and optimizer state off the device.
- ``NPUAccelerator`` / ``MUSAAccelerator``: registered as ``accelerator="npu" | "musa"``.
- ``DeviceMixedPrecision``: autocast on the real device type.
- ``apply_fused_ops(model, device_type)``: RMSNorm / rotary swapped for the device's fused
  kernels (``torch_npu.npu_rms_norm`` / ``npu_rotary_mul`` on Ascend, ``F.rms_norm``
  elsewhere) per module instance, through transformers' kernel hooks (``kernels.kernelize``
  with in-process layers) or, without hooks, a probed instance forward; probed against the
  eager math; returns a ``FusedOpsReport`` saying which path ran.
- ``LiveBytes``: a dispatch mode counting the bytes of live tensor storages and their peak
  (works on the meta device: what a forward would hold, with nothing allocated).

The files:

``hybrid_shard.py``   ``HybridShardStrategy``; its FSDP2 building blocks (the mesh, wrapping,
                      the mixed-precision policy, a global grad norm): ``sharding.py``.
``checkpoint.py``     its checkpoints read into full CPU tensors in one process.
``offload.py``        a role's weights, grads and optimizer state moved off the device and back.
``accelerators.py``   the NPU and MUSA accelerators; ``devices.py``: device-family facts
                      (vendor module, collective backend, visible-device variables).
``precision.py``      ``DeviceMixedPrecision``; ``dtypes.py``: the one table of dtype names.
``fused.py``          the fused-ops swap, through kernel hooks; ``fused_probe.py``: the probe
                      path without hooks; ``fused_kernels.py``: the kernels both run.
``live_bytes.py``     ``LiveBytes``, live storage bytes under a dispatch mode.

Install on its own with ``pip install ./strategies`` (distribution ``wmrl-strategies``); the
runnable example is in ``strategies/README.md``.

The names load on first use (PEP 562), so a process that needs only ``strategies.devices`` or
``strategies.fused`` (a rollout worker) does not import Lightning. ``Trainer(accelerator="npu"
| "musa")`` resolves once Lightning and ``strategies`` are both imported (in either order:
``import strategies`` registers them when Lightning is already loaded, any of the Lightning
classes here registers them on first use) or after ``register_accelerators()``.
"""

import importlib
import sys

# eager (torch only): the function ``offload`` shares its name with its submodule, and a lazy
# name would be shadowed by the submodule once something imports ``strategies.offload``
from strategies.offload import MoveStats as MoveStats
from strategies.offload import offload as offload
from strategies.offload import onload as onload

# name -> submodule that defines it
_EXPORTS = {
    "DeviceMixedPrecision": "precision",
    "FusedOpsReport": "fused",
    "HybridShardStrategy": "hybrid_shard",
    "LiveBytes": "live_bytes",
    "MUSAAccelerator": "accelerators",
    "NPUAccelerator": "accelerators",
    "apply_fully_shard": "sharding",
    "apply_fused_ops": "fused",
    "build_mesh": "sharding",
    "clip_grad_norm_": "sharding",
    "grad_norm": "sharding",
    "load_full_checkpoint": "checkpoint",
    "full_state_dict": "checkpoint",
    "load_full_state_dict": "checkpoint",
    "param_dtype_for_precision": "precision",
    "precision_for_device": "precision",
    "register_accelerators": "accelerators",
    "register_strategies": "hybrid_shard",
    "remove_fused_ops": "fused",
}
# the submodules that import Lightning: loading one registers the accelerators and the
# strategy too
_LIGHTNING = ("accelerators", "hybrid_shard", "precision", "checkpoint")

__all__ = sorted([*_EXPORTS, "MoveStats", "offload", "onload"])


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'strategies' has no attribute {name!r}")
    if _EXPORTS[name] in _LIGHTNING:
        importlib.import_module("strategies.accelerators").register_accelerators()
        importlib.import_module("strategies.hybrid_shard").register_strategies()
    value = getattr(importlib.import_module(f"strategies.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if "lightning" in sys.modules or "lightning.pytorch" in sys.modules:
    __getattr__("register_accelerators")()
    __getattr__("register_strategies")()
