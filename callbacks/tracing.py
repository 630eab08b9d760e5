"""Collect every process's trace spans once per step; write one Chrome trace per run."""

from __future__ import annotations

import json
import os
from typing import Any

import lightning as L

from wmrl.interfaces import RolloutSource
from wmrl.measure.tracing import Tracer


class TracingCallback(L.Callback):
    """Trainer spans (``Tracer.flush()`` here) and the rollout actors' spans (returned with
    each batch, ``datamodule.pop_trace_events()``) are appended to ``<dir>/trace-steps.jsonl``
    after every step; at the end they are merged into ``<dir>/trace.json`` (open it in
    https://ui.perfetto.dev or chrome://tracing) and, with a WandbLogger, saved to the wandb
    run (``files/trace.json``; ``wandb sync`` uploads it with the run)."""

    def __init__(self, dir: str, enabled: bool = True):
        self.dir = dir
        self.enabled = enabled
        self.path: str | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        Tracer.configure(enabled=self.enabled, process_name=f"trainer-{trainer.global_rank}")

    def _flush(self, trainer: L.Trainer) -> None:
        events = Tracer.flush()
        dm = trainer.datamodule
        if isinstance(dm, RolloutSource):
            events += dm.pop_trace_events()
        if events:
            os.makedirs(self.dir, exist_ok=True)
            with open(os.path.join(self.dir, f"trace-rank{trainer.global_rank}.jsonl"), "a") as f:
                f.write("".join(json.dumps(e, default=str) + "\n" for e in events))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._flush(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._flush(trainer)
        if trainer.is_global_zero and os.path.isdir(self.dir):
            self.path = str(Tracer.merge([self.dir], os.path.join(self.dir, "trace.json")))
            save_to_wandb(trainer, self.path)


def save_to_wandb(trainer: L.Trainer, path: str) -> None:
    """``path`` into the files of every WandbLogger's run (rank zero; no-op without one)."""
    from lightning.pytorch.loggers import WandbLogger

    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger):
            lg.experiment.save(path, base_path=os.path.dirname(path), policy="now")
