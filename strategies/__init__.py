"""Lightning strategies and accelerators for any Lightning project (torch + lightning only).

- ``HybridShardStrategy``: FSDP2 on a ("replicate", "shard") mesh, CPU/CUDA/ROCm/NPU/MUSA.
- ``offload`` / ``onload``: move a role's weights, grads and optimizer state off the device.
- ``NPUAccelerator`` / ``MUSAAccelerator``: registered as ``accelerator="npu" | "musa"``.
- ``DeviceMixedPrecision``: autocast on the real device type.
"""

from strategies.accelerators import MUSAAccelerator, NPUAccelerator, register_accelerators
from strategies.hybrid_shard import HybridShardStrategy
from strategies.offload import MoveStats, offload, onload
from strategies.precision import DeviceMixedPrecision, precision_for_device
from strategies.sharding import apply_fully_shard, build_mesh, clip_grad_norm_, grad_norm

register_accelerators()

__all__ = [
    "DeviceMixedPrecision",
    "HybridShardStrategy",
    "MUSAAccelerator",
    "MoveStats",
    "NPUAccelerator",
    "apply_fully_shard",
    "build_mesh",
    "clip_grad_norm_",
    "grad_norm",
    "offload",
    "onload",
    "precision_for_device",
    "register_accelerators",
]
