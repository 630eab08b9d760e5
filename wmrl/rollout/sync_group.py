"""``SyncGroup``: a process group of one trainer rank (group rank 0) and its policy actors,
for weight sync, built beside whatever default group the trainer already has.

torch.distributed allows one default group per process and ``new_group`` only subdivides
it, while a trainer rank's actors are not in the trainer's world. So the group is built
directly from the backends' process-group classes over its own TCPStore (the trainer rank
hosts it): ``gloo`` always (CPU tensors), plus the device's collective library (NCCL / RCCL /
HCCL / MCCL) when ``device`` is an accelerator - the ``cpu:gloo,<dev>:<ccl>`` pair. A
broadcast picks the backend by the tensor's device.
"""

from __future__ import annotations

import datetime
import importlib
import socket

import torch
import torch.distributed as dist

from strategies import devices

# where each vendor keeps its process-group class (torch_npu / torch_musa register them
# when imported); stock torch has ProcessGroupNCCL (also RCCL on ROCm) and ProcessGroupXCCL
_VENDOR_CLASSES = {
    "nccl": [("torch.distributed", "ProcessGroupNCCL")],
    "xccl": [("torch.distributed", "ProcessGroupXCCL")],
    "hccl": [("torch_npu._C._distributed_c10d", "ProcessGroupHCCL"),
             ("torch_npu.distributed", "ProcessGroupHCCL")],
    "mccl": [("torch_musa._MUSAC._distributed_c10d", "ProcessGroupMCCL"),
             ("torch_musa.distributed", "ProcessGroupMCCL")],
}


def free_port(host: str = "") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def device_group_class(device_type: str) -> type:
    """The process-group class of ``device_type``'s collective library."""
    backend = devices.family(device_type).backend
    devices.import_vendor(device_type)
    for module, name in _VENDOR_CLASSES[backend]:
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            cls = None
        if cls is not None:
            return cls
    raise RuntimeError(
        f"rollout.weight_sync.transport=device: no {backend} process-group class in this "
        f"torch build for {device_type}; use transport=gloo")


class SyncGroup:
    """``SyncGroup(host, port, rank, size, device)`` on every member at once (the constructor
    blocks until all have joined; rank 0 hosts the store)."""

    def __init__(self, host: str, port: int, rank: int, size: int,
                 device: str | torch.device = "cpu", timeout_s: float = 600.0):
        timeout = datetime.timedelta(seconds=timeout_s)
        self.rank, self.size, self.device = rank, size, torch.device(device)
        self.store = dist.TCPStore(host, port, size, is_master=rank == 0, timeout=timeout,
                                   wait_for_workers=False)
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo", self.store), rank, size,
                                          timeout)
        self.ccl = None
        if self.device.type != "cpu":
            cls = device_group_class(self.device.type)
            self.ccl = cls(dist.PrefixStore(self.device.type, self.store), rank, size)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        """In place, from group rank ``src``; gloo for CPU tensors, the device library else."""
        pg = self.gloo if tensor.device.type == "cpu" else self.ccl
        if pg is None:
            raise RuntimeError(f"SyncGroup on {self.device} has no backend for {tensor.device}")
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        pg.broadcast([tensor], opts).wait()


def broadcast(tensor: torch.Tensor, group, src: int) -> None:
    """Broadcast over a :class:`SyncGroup` or a registered torch.distributed group."""
    if isinstance(group, SyncGroup):
        group.broadcast(tensor, src)
    else:
        dist.broadcast(tensor, group=group, group_src=src)
