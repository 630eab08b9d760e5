"""Push the trainer's policy weights to the rollout workers after every update."""

from __future__ import annotations

from typing import Any

import lightning as L

from strategies import full_state_dict
from wmrl.tracing import Tracer


class WeightSyncCallback(L.Callback):
    """Before the first rollout (version 0, or the restored version on resume) and after each
    training step, send ``pl_module.policy`` to ``trainer.datamodule.sync_weights``."""

    def __init__(self) -> None:
        self.last_seconds = 0.0

    def _sync(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        with Tracer.trace_span("trainer.weight_sync", version=pl_module.policy_version):
            state = full_state_dict(pl_module.policy)
            # every trainer rank owns its own rollout workers
            self.last_seconds = trainer.datamodule.sync_weights(state, pl_module.policy_version)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sync(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        self._sync(trainer, pl_module)
        pl_module.log("time/weight_sync_s", self.last_seconds, on_step=True, batch_size=1)
