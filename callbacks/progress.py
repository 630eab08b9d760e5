"""The training bar counts RL steps: ``step 12/30`` (Lightning's own bar reads "Epoch 0/-2" for
a run bounded by ``trainer.max_steps``, as every wmrl fit is)."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar


class StepProgressBar(TQDMProgressBar):
    """Lightning's tqdm bar, through its public hooks: labelled ``step``, its total
    ``trainer.max_steps``, starting at the resumed step."""

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if trainer.max_steps and trainer.max_steps > 0:
            bar.reset(total=trainer.max_steps)
            bar.initial = trainer.global_step
            bar.n = trainer.global_step
        bar.set_description("step")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self.train_progress_bar
        bar.n = trainer.global_step  # one RL step per batch, however many optimizer steps
        bar.set_postfix(self.get_metrics(trainer, pl_module))
        bar.refresh()
