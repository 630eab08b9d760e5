"""``HybridShardStrategy``: FSDP2 hybrid sharding for any LightningModule, on CUDA, ROCm,
Ascend NPU, MUSA and CPU (gloo).

Mesh ("replicate", "shard") = (nodes, devices per node) by default: parameters are
all-gathered inside a node and only gradient all-reduce crosses nodes. Built on Lightning's
``ModelParallelStrategy`` (FSDP2, DCP checkpoints); overrides what hard-codes CUDA: the mesh
device, the process-group backend (``cpu:gloo,<dev>:<backend>``) and the autocast device.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.fabric.plugins.collectives.torch_collective import default_pg_timeout
from lightning.fabric.utilities.init import _materialize_distributed_module
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.fabric.utilities.optimizer import _optimizers_to_device
from lightning.fabric.utilities.rank_zero import rank_zero_warn
from lightning.pytorch.strategies import ModelParallelStrategy, StrategyRegistry
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy

from strategies import devices, sharding
from strategies.precision import param_dtype_for_precision, precision_for_device


class HybridShardStrategy(ModelParallelStrategy):
    """FSDP2 over a ("replicate", "shard") device mesh.

    Args:
        shard_size: ranks per shard group: ``"auto"`` = devices per node (HSDP), ``"world"`` =
            all ranks (plain FSDP), or an int dividing the world size (e.g. 8).
        wrap_classes: module classes (objects or ``"pkg.mod.Class"``) to ``fully_shard`` one by one
            (e.g. transformer blocks); then every top-level child module of the LightningModule
            (``root_modules``) is sharded as a root. Skipped when ``configure_model`` already
            applied ``fully_shard``.
        root_modules: names of submodules of the LightningModule to shard as roots, dotted
            paths allowed (``model.transformer``; default: all direct children with parameters).
            Their ``forward`` must be what training calls. Parameters outside them are neither
            sharded nor synchronised (frozen ones are replicated): a warning names trainable ones.
        param_dtype: compute dtype of the gathered parameters (FSDP2 ``MixedPrecisionPolicy``).
            None (default) follows the Trainer's precision: ``bf16-mixed``/``bf16-true`` ->
            bfloat16, ``16-mixed``/``16-true`` -> float16, otherwise the parameters' own dtype
            (``32-true`` computes in float32). An explicit dtype wins.
        reduce_dtype: dtype of the gradient reduction; None keeps the gradient dtype.
        reshard_after_forward: free gathered parameters after forward (ZeRO-3) or keep them (ZeRO-2).
        sync_module_states: broadcast rank 0's weights before sharding. Turn off when every rank
            loads the same checkpoint (a broadcast of a multi-billion model can hang).
        accumulation_sync: on non-final micro-batches of gradient accumulation, ``"reduce_scatter"``
            keeps the in-node reduce-scatter but skips the cross-replica all-reduce; ``"none"``
            skips both (unsharded gradients accumulate: more memory, no communication).
        gradient_clip_norm: when set, clip by the global norm over the whole mesh in
            ``optimizer_step`` (use this instead of ``Trainer(gradient_clip_val=...)``). Leave
            None when the LightningModule clips itself: under manual optimization its
            ``opt.step()`` also runs through ``optimizer_step``, so both would clip.
        stagger_s: local rank ``i`` sleeps ``i * stagger_s`` seconds before its first device call.
        save_distributed_checkpoint: sharded DCP directory (True) or one full file on rank 0.
        process_group_backend: default ``"gloo"`` on CPU, ``"cpu:gloo,<dev>:<backend>"`` otherwise.
    """

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("hybrid_shard", cls, override=True,
                                   description="FSDP2 over a (replicate, shard) device mesh")

    strategy_name = "hybrid_shard"

    def __init__(
        self,
        shard_size: int | Literal["auto", "world"] = "auto",
        wrap_classes: Sequence[type | str] = (),
        root_modules: Sequence[str] | None = None,
        param_dtype: str | torch.dtype | None = None,
        reduce_dtype: str | torch.dtype | None = "float32",
        reshard_after_forward: bool = True,
        sync_module_states: bool = True,
        accumulation_sync: Literal["reduce_scatter", "none"] = "reduce_scatter",
        gradient_clip_norm: float | None = None,
        stagger_s: float = 0.0,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
    ) -> None:
        super().__init__(
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )
        if accumulation_sync not in ("reduce_scatter", "none"):
            raise ValueError(
                f"strategy.accumulation_sync={accumulation_sync!r}: use 'reduce_scatter' or 'none'."
            )
        if not (shard_size in ("auto", "world") or (isinstance(shard_size, int) and shard_size > 0)):
            raise ValueError(f"strategy.shard_size={shard_size!r}: use 'auto', 'world' or an int > 0.")
        self.shard_size = shard_size
        self.wrap_classes = sharding.resolve_classes(wrap_classes)
        self.root_modules = list(root_modules) if root_modules is not None else None
        self.param_dtype = sharding.resolve_dtype(param_dtype, "param_dtype")
        self.reduce_dtype = sharding.resolve_dtype(reduce_dtype, "reduce_dtype")
        self.reshard_after_forward = reshard_after_forward
        self.sync_module_states = sync_module_states
        self.accumulation_sync = accumulation_sync
        self.gradient_clip_norm = gradient_clip_norm
        self.stagger_s = stagger_s
        self.last_grad_norm: torch.Tensor | None = None

    # ---------------------------------------------------------------- environment and mesh
    def _resolved_shard_size(self) -> int:
        if self.shard_size == "auto":
            return self.num_processes
        if self.shard_size == "world":
            return self.world_size
        return int(self.shard_size)

    def setup_environment(self) -> None:
        dev = self.root_device.type
        devices.import_vendor(dev)  # torch_musa must patch DeviceMesh/FSDP2 before any mesh
        devices.stagger_first_touch(self.local_rank, self.stagger_s)
        # the stock connector autocasts on "cuda" for every non-CPU accelerator
        self.precision_plugin = precision_for_device(self.precision_plugin, dev)
        self._setup_distributed()  # accelerator.setup_device + init_process_group
        self._device_mesh = sharding.build_mesh(dev, self.world_size, self._resolved_shard_size())
        assert self.lightning_module is not None
        self.lightning_module._device_mesh = self._device_mesh

    def _get_process_group_backend(self) -> str:
        return self._process_group_backend or devices.process_group_backend(self.root_device.type)

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        # both mesh dimensions are data parallel: every rank sees different samples
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def barrier(self, name: str | None = None) -> None:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()

    # ---------------------------------------------------------------- sharding
    def compute_param_dtype(self) -> torch.dtype | None:
        """``param_dtype`` if set, else the dtype the Trainer's precision computes in (None =
        keep the parameters' dtype)."""
        if self.param_dtype is not None:
            return self.param_dtype
        return param_dtype_for_precision(getattr(self.precision_plugin, "precision", None))

    def _roots(self, module: nn.Module) -> list[nn.Module]:
        if self.root_modules is not None:
            names = dict(module.named_modules())  # dotted paths: "model.transformer"
            missing = [n for n in self.root_modules if n not in names]
            if missing:
                raise ValueError(f"strategy.root_modules {missing} are not submodules of {type(module).__name__}.")
            roots = [names[n] for n in self.root_modules]
            _warn_unsharded(module, roots, self.root_modules)
            return roots
        own = [n for n, _ in module.named_parameters(recurse=False)]
        if own:
            raise ValueError(
                f"{type(module).__name__} owns parameters {own} directly; FSDP2 shards modules whose "
                f"forward is called. Move them into a submodule, or shard in configure_model()."
            )
        return [c for c in module.children() if any(True for _ in c.parameters())]

    def shard_module(self, module: nn.Module) -> None:
        """Broadcast (optional) and ``fully_shard`` ``module`` unless it is already sharded."""
        if any(isinstance(m, FSDPModule) for m in module.modules()):
            if self.sync_module_states:
                sharding.broadcast_module_states(module, self.device_mesh)
            return
        if self.sync_module_states:
            sharding.broadcast_module_states(module, device=self.root_device)
        policy = None
        param_dtype = self.compute_param_dtype()
        if param_dtype is not None or self.reduce_dtype is not None:
            policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=self.reduce_dtype)
        sharding.apply_fully_shard(
            module,
            self.device_mesh,
            self.wrap_classes,
            roots=self._roots(module),
            mp_policy=policy,
            reshard_after_forward=self.reshard_after_forward,
        )

    def setup(self, trainer: Any) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel

        assert self.model is not None and self.accelerator is not None
        self.accelerator.setup(trainer)
        if any(isinstance(m, FullyShardedDataParallel) for m in self.model.modules()):
            raise TypeError(f"{type(self).__name__} needs FSDP2 (fully_shard), found FSDP1 modules.")
        _materialize_distributed_module(self.model, self.root_device)
        self.shard_module(self.model)  # fully_shard moves each shard to the mesh device
        self.model_to_device()  # whatever is left (unsharded buffers, metrics)
        self.model = self.precision_plugin.convert_module(self.model)
        self.barrier()
        if trainer.state.fn == TrainerFn.FITTING:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()
        if trainer.state.fn == TrainerFn.FITTING:
            _optimizers_to_device(self.optimizers, self.root_device)

    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    # ---------------------------------------------------------------- accumulation and clipping
    def _fsdp_modules(self) -> list[FSDPModule]:
        return [m for m in self.model.modules() if isinstance(m, FSDPModule)] if self.model else []

    @contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Non-final micro-batch: skip the cross-replica all-reduce (or all gradient comms)."""
        mods = self._fsdp_modules()
        for m in mods:
            if self.accumulation_sync == "none":
                m.set_requires_gradient_sync(False, recurse=False)
            else:
                m.set_requires_all_reduce(False, recurse=False)
            m.set_is_last_backward(False)
        try:
            yield
        finally:
            for m in mods:
                m.set_requires_gradient_sync(True, recurse=False)
                m.set_is_last_backward(True)

    def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        if self.gradient_clip_norm is None:
            return super().optimizer_step(optimizer, closure, model, **kwargs)

        def closure_then_clip() -> Any:
            out = closure()
            params = [p for g in optimizer.param_groups for p in g["params"]]
            self.last_grad_norm = sharding.clip_grad_norm_(params, self.gradient_clip_norm)
            return out

        return super().optimizer_step(optimizer, closure_then_clip, model, **kwargs)

    # ---------------------------------------------------------------- checkpoints (atomic)
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Same layout as ``ModelParallelStrategy`` (DCP folder with ``meta.pt``, or one file),
        written under a temporary name and renamed into place."""
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint does not take storage_options.")
        path = Path(self.broadcast(str(filepath)))
        tmp = path.with_name(f".{path.name}.tmp-{self.broadcast(uuid.uuid4().hex[:8])}")
        if self._save_distributed_checkpoint:
            from torch.distributed.checkpoint import save

            state = {"state_dict": checkpoint.pop("state_dict")}
            for idx, opt_state in enumerate(checkpoint.pop("optimizer_states", [])):
                state[f"optimizer_{idx}"] = opt_state
            if self.global_rank == 0:
                tmp.mkdir(parents=True)
            self.barrier()
            save(state, checkpoint_id=tmp)
            if self.global_rank == 0:
                torch.save(checkpoint, tmp / _METADATA_FILENAME)
                _replace(tmp, path)
        elif self.global_rank == 0:
            tmp.parent.mkdir(parents=True, exist_ok=True)
            torch.save(checkpoint, tmp)
            _replace(tmp, path)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """As ``ModelParallelStrategy``; a DCP folder is read partially when the LightningModule
        sets ``strict_loading = False``: a checkpoint that holds only some of its entries (a
        fine-tune's trainable parameters, the frozen rest rebuilt from its source) restores
        those, the others keep the values they were built with."""
        path = Path(self.broadcast(str(checkpoint_path)))
        if self.lightning_module.strict_loading or not (path / ".metadata").is_file():
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        from torch.distributed.checkpoint import DefaultLoadPlanner, load
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        state = {"state_dict": get_model_state_dict(self.model)}
        load(state, checkpoint_id=path, planner=DefaultLoadPlanner(allow_partial_load=True))
        set_model_state_dict(self.model, state["state_dict"], options=StateDictOptions(strict=False))
        for idx, optimizer in enumerate(self.optimizers):
            key = f"optimizer_{idx}"
            opt_state = {key: get_optimizer_state_dict(self.model, optimizer)}
            load(opt_state, checkpoint_id=path)
            set_optimizer_state_dict(self.model, optimizer, optim_state_dict=opt_state[key],
                                     options=StateDictOptions(cpu_offload=True))
        return torch.load(path / _METADATA_FILENAME, weights_only=True)  # meta.pt: loop state, no code

    def remove_checkpoint(self, filepath: Any) -> None:
        if self.global_rank == 0:
            path = Path(filepath)
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)

    def teardown(self) -> None:
        super().teardown()


def _warn_unsharded(
    module: nn.Module, roots: Sequence[nn.Module], root_names: Sequence[str], show: int = 5
) -> list[str]:
    """Warn (rank 0) about trainable parameters of ``module`` outside every root: FSDP2 neither
    shards them nor reduces their gradients, so each rank would train its own copy (a frozen
    part, such as a VAE that only encodes, is simply replicated). Returns their names."""
    inside = {id(p) for root in roots for p in root.parameters()}
    left = [name for name, p in module.named_parameters()
            if id(p) not in inside and p.requires_grad]
    if left:
        more = f" and {len(left) - show} more" if len(left) > show else ""
        rank_zero_warn(
            f"{len(left)} parameter(s) of {type(module).__name__} are outside "
            f"strategy.root_modules={list(root_names)}, so they are neither sharded nor "
            f"synchronised across ranks: {', '.join(left[:show])}{more}. Add their module to "
            f"root_modules.",
            category=UserWarning,
        )
    return left


def _replace(tmp: Path, path: Path) -> None:
    """Put ``tmp`` at ``path``: ``os.replace`` for files; for folders move the old one aside first."""
    if path.is_dir():
        old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old)
    else:
        os.replace(tmp, path)


def register_strategies() -> None:
    """Make ``Trainer(strategy="hybrid_shard")`` resolve to ``HybridShardStrategy`` with its
    defaults (idempotent), through Lightning's own hook, ``Strategy.register_strategies``."""
    if "hybrid_shard" not in StrategyRegistry:
        HybridShardStrategy.register_strategies(StrategyRegistry)


register_strategies()  # loading this module (Lightning is loaded by then) registers it
