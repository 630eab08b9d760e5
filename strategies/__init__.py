"""Lightning strategies and accelerators for any Lightning project (torch + lightning only).

- ``HybridShardStrategy``: FSDP2 on a ("replicate", "shard") mesh, CPU/CUDA/ROCm/NPU/MUSA;
  ``param_dtype=None`` (default) computes in the Trainer's precision.
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

Install on its own with ``pip install ./strategies`` (distribution ``wmrl-strategies``); the
runnable example is in ``strategies/README.md``.
"""

from strategies.accelerators import MUSAAccelerator, NPUAccelerator, register_accelerators
from strategies.checkpoint import full_state_dict, load_full_checkpoint, load_full_state_dict
from strategies.fused import FusedOpsReport, apply_fused_ops, remove_fused_ops
from strategies.hybrid_shard import HybridShardStrategy
from strategies.offload import MoveStats, offload, onload
from strategies.precision import (
    DeviceMixedPrecision,
    param_dtype_for_precision,
    precision_for_device,
)
from strategies.sharding import apply_fully_shard, build_mesh, clip_grad_norm_, grad_norm

register_accelerators()

__all__ = [
    "DeviceMixedPrecision",
    "FusedOpsReport",
    "HybridShardStrategy",
    "MUSAAccelerator",
    "MoveStats",
    "NPUAccelerator",
    "apply_fully_shard",
    "apply_fused_ops",
    "build_mesh",
    "clip_grad_norm_",
    "grad_norm",
    "load_full_checkpoint",
    "full_state_dict",
    "load_full_state_dict",
    "offload",
    "onload",
    "param_dtype_for_precision",
    "precision_for_device",
    "register_accelerators",
    "remove_fused_ops",
]
