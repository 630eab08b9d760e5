"""Move the trainer's weights, gradients and optimizer state off the device while other roles
(rollout, world model) use it, and back for the training step."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from strategies.offload import MoveStats, offload, onload

_ONLOAD_HOOKS = ("on_train_batch_start",)
_OFFLOAD_HOOKS = ("on_train_start", "on_train_batch_end")


class PhaseOffloadCallback(Callback):
    """Onload at ``onload_on``, offload at each hook in ``offload_on``.

    For Lightning loops whose batches are made on the trainer's device by something else
    between steps (a generator, a simulator): offload when training starts and after each
    training batch, onload at the start of each training batch. (wmrl's ``GRPOModule`` moves
    its own state around the rollout inside its step and needs no callback.)
    ``history`` keeps the last ``keep`` (hook, MoveStats) pairs; seconds and bytes are logged
    as ``offload/seconds``, ``offload/gb`` when ``log_stats``. On a CPU trainer the moves are
    no-ops.
    """

    def __init__(
        self,
        onload_on: str = "on_train_batch_start",
        offload_on: tuple[str, ...] | list[str] = ("on_train_start", "on_train_batch_end"),
        offload_optimizer: bool = True,
        device: str = "cpu",
        pin_memory: bool = False,
        log_stats: bool = True,
        keep: int = 100,
    ) -> None:
        if onload_on not in _ONLOAD_HOOKS:
            raise ValueError(f"phase_offload.onload_on={onload_on!r}: one of {_ONLOAD_HOOKS}.")
        bad = [h for h in offload_on if h not in _OFFLOAD_HOOKS]
        if bad:
            raise ValueError(f"phase_offload.offload_on has {bad}: choose from {_OFFLOAD_HOOKS}.")
        self.onload_on = onload_on
        self.offload_on = tuple(offload_on)
        self.offload_optimizer = offload_optimizer
        self.device = device
        self.pin_memory = pin_memory
        self.log_stats = log_stats
        self.keep = keep
        self.history: list[tuple[str, MoveStats]] = []
        self.offloaded = False

    def _optimizers(self, trainer: pl.Trainer) -> list[Any]:
        if not self.offload_optimizer:
            return [None]
        return [getattr(o, "_optimizer", o) for o in trainer.optimizers] or [None]

    def _record(self, hook: str, stats: MoveStats, pl_module: pl.LightningModule) -> None:
        self.history = (self.history + [(hook, stats)])[-self.keep :]
        if self.log_stats and hook in ("on_train_batch_start", "on_train_batch_end"):
            kind = "onload" if hook == self.onload_on else "offload"
            pl_module.log(f"{kind}/seconds", stats.seconds, on_step=True, on_epoch=False,
                          batch_size=1)
            pl_module.log(f"{kind}/gb", stats.bytes / 1e9, on_step=True, on_epoch=False,
                          batch_size=1)

    def do_offload(self, trainer: pl.Trainer, pl_module: pl.LightningModule, hook: str) -> None:
        if self.offloaded:
            return
        opts = self._optimizers(trainer)
        stats = offload(pl_module, opts[0], self.device, self.pin_memory)
        for opt in opts[1:]:
            stats.bytes += offload(None, opt, self.device, self.pin_memory).bytes
        self.offloaded = True
        self._record(hook, stats, pl_module)

    def do_onload(self, trainer: pl.Trainer, pl_module: pl.LightningModule, hook: str) -> None:
        if not self.offloaded:
            return
        opts = self._optimizers(trainer)
        device = trainer.strategy.root_device
        stats = onload(pl_module, opts[0], device)
        for opt in opts[1:]:
            stats.bytes += onload(None, opt, device).bytes
        self.offloaded = False
        self._record(hook, stats, pl_module)

    def on_train_start(self, trainer, pl_module):
        if "on_train_start" in self.offload_on:
            self.do_offload(trainer, pl_module, "on_train_start")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.onload_on == "on_train_batch_start":
            self.do_onload(trainer, pl_module, "on_train_batch_start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if "on_train_batch_end" in self.offload_on:
            self.do_offload(trainer, pl_module, "on_train_batch_end")

    def on_train_end(self, trainer, pl_module):
        # leave the model where the user expects it (checkpointing, evaluation)
        self.do_onload(trainer, pl_module, "on_train_end")
