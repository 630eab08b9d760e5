"""FSDP2 building blocks: the ("replicate", "shard") mesh, wrapping by module class, the
mixed-precision policy, rank-0 state broadcast, and a grad-norm that is global over the mesh."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.placement_types import Shard

from strategies.dtypes import to_dtype


def resolve_dtype(value: str | torch.dtype | None, key: str) -> torch.dtype | None:
    """``strategy.<key>``: a name of ``strategies.dtypes.DTYPES``, a torch dtype or None."""
    return None if value is None else to_dtype(value, f"strategy.{key}")


def resolve_classes(classes: Iterable[type | str]) -> tuple[type, ...]:
    """Module classes from class objects or import paths ("pkg.module.ClassName")."""
    out = []
    for item in classes:
        if isinstance(item, type):
            out.append(item)
            continue
        mod_name, _, cls_name = str(item).rpartition(".")
        try:
            cls = getattr(importlib.import_module(mod_name), cls_name)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(
                f"strategy.wrap_classes entry {item!r} is not an importable class path "
                f"('package.module.ClassName'): {err}"
            ) from err
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"strategy.wrap_classes entry {item!r} is not an nn.Module class.")
        out.append(cls)
    return tuple(out)


def mesh_shape(world_size: int, shard_size: int) -> tuple[int, int]:
    """(replicate, shard) with replicate * shard == world_size."""
    if shard_size < 1 or world_size % shard_size:
        raise ValueError(
            f"strategy.shard_size={shard_size} must be >= 1 and divide the world size {world_size} "
            f"(e.g. the number of devices per node)."
        )
    return world_size // shard_size, shard_size


def build_mesh(device_type: str, world_size: int, shard_size: int) -> DeviceMesh:
    """2-D mesh ("replicate", "shard"): rank r sits at (r // shard_size, r % shard_size), so a
    node's ranks form one shard group and gradient all-reduce runs across nodes only."""
    return init_device_mesh(
        device_type, mesh_shape(world_size, shard_size), mesh_dim_names=("replicate", "shard")
    )


def fsdp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The mesh handed to ``fully_shard``: 1-D shard mesh when there is one replica (plain
    FSDP), the 2-D mesh (HSDP) otherwise."""
    return mesh["shard"] if mesh["replicate"].size() == 1 else mesh


def apply_fully_shard(
    model: nn.Module,
    mesh: DeviceMesh,
    wrap_classes: Sequence[type] = (),
    roots: Sequence[nn.Module] | None = None,
    mp_policy: MixedPrecisionPolicy | None = None,
    reshard_after_forward: bool = True,
) -> list[nn.Module]:
    """``fully_shard`` every submodule of a class in ``wrap_classes`` (innermost first), then each
    module of ``roots`` (default: ``model``). Roots must be modules whose ``forward`` is called:
    FSDP2 all-gathers a module's own parameters in its pre-forward hook. Returns the wrapped
    modules."""
    kw = {"mesh": fsdp_mesh(mesh), "reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        kw["mp_policy"] = mp_policy
    wrapped = []
    if wrap_classes:
        for sub in reversed(list(model.modules())):
            if isinstance(sub, tuple(wrap_classes)) and not isinstance(sub, FSDPModule):
                fully_shard(sub, **kw)
                wrapped.append(sub)
    for root in [model] if roots is None else roots:
        if not isinstance(root, FSDPModule):
            # The root keeps its params gathered after forward: backward needs them at once.
            fully_shard(root, **{**kw, "reshard_after_forward": False})
            wrapped.append(root)
    return wrapped


@torch.no_grad()
def broadcast_module_states(
    module: nn.Module,
    mesh: DeviceMesh | None = None,
    src: int = 0,
    device: torch.device | None = None,
) -> None:
    """Make every rank hold rank ``src``'s parameters and buffers. Plain tensors are broadcast
    over the world, one at a time through ``device`` when given (host-built models never sit
    whole on the device); DTensor shards are broadcast across the mesh's "replicate" dimension
    (each shard position takes replica 0's shard)."""
    for tensor in list(module.parameters()) + list(module.buffers()):
        if isinstance(tensor, DTensor):
            if mesh is None or "replicate" not in (mesh.mesh_dim_names or ()):
                continue
            group = mesh.get_group("replicate")
            if dist.get_world_size(group) > 1:
                dist.broadcast(tensor.to_local(), group=group, group_src=0)
        elif device is None or tensor.device == device:
            dist.broadcast(tensor.data, src=src)
        else:
            on_device = tensor.data.to(device)
            dist.broadcast(on_device, src=src)
            tensor.data.copy_(on_device)


@torch.no_grad()
def grad_norm(parameters: Iterable[torch.Tensor], norm_type: float = 2.0) -> torch.Tensor:
    """Global gradient norm ``(sum_p ||g_p||^q)^(1/q)`` over all ranks' shards.

    For a DTensor gradient each rank holds a piece; pieces along ``Shard`` mesh dims are disjoint
    and pieces along ``Replicate`` dims are copies, so local sums of ``|g|^q`` are all-reduced over
    the Shard dims only (max for q = inf). Plain tensors count once (they are replicated).
    """
    q = float(norm_type)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    by_groups: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        if isinstance(g, DTensor):
            shard_dims = tuple(i for i, pl in enumerate(g.placements) if isinstance(pl, Shard))
            groups = tuple(g.device_mesh.get_group(i) for i in shard_dims)
            by_groups.setdefault(groups, []).append(g.to_local())
        else:
            by_groups.setdefault((), []).append(g)
    total = None
    for groups, locals_ in by_groups.items():
        flat = [t.detach().float() for t in locals_]
        if q == float("inf"):
            part = torch.stack([t.abs().max() if t.numel() else t.new_zeros(()) for t in flat]).max()
            op = dist.ReduceOp.MAX
        else:
            part = torch.stack([t.abs().pow(q).sum() for t in flat]).sum()
            op = dist.ReduceOp.SUM
        for group in groups:
            dist.all_reduce(part, op=op, group=group)
        part = part.cpu()
        if total is None:
            total = part
        else:
            total = torch.maximum(total, part) if q == float("inf") else total + part
    return total if q == float("inf") else total.pow(1.0 / q)


@torch.no_grad()
def clip_grad_norm_(
    parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
) -> torch.Tensor:
    """Scale gradients by ``min(1, max_norm / (norm + 1e-6))`` with the global norm of
    ``grad_norm``; returns that norm (identical on every rank)."""
    params = [p for p in parameters if p.grad is not None]
    norm = grad_norm(params, norm_type)
    coef = float(max_norm) / (float(norm) + 1e-6)
    if coef < 1.0:
        for p in params:
            p.grad.mul_(coef)
    return norm
