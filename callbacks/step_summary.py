"""One readable line per training step (beside Lightning's progress bar)."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only

from wmrl.interfaces import PolicyTrainer

FIELDS = (  # (metric key, label, format)
    ("rollout/return", "return", "{:.3f}"),
    ("rollout/success", "success", "{:.2f}"),
    ("wm/fragile_success", "fragile", "{:.2f}"),
    ("rollout/zero_var_groups", "zero-var groups", "{:.2f}"),
    ("train/loss", "loss", "{:+.4f}"),
    ("train/approx_kl", "kl", "{:.2e}"),
    ("train/ref_kl", "ref kl", "{:.2e}"),  # algorithm.kl_coef > 0 only
    ("train/clip_fraction", "clip", "{:.3f}"),
    ("train/entropy", "entropy", "{:.3f}"),
    ("train/grad_norm", "|g|", "{:.3f}"),
    ("time/rollout_s", "rollout s", "{:.1f}"),
    ("time/train_s", "train s", "{:.1f}"),
)


def format_summary(step: int, metrics: dict[str, float]) -> str:
    parts = [f"step {step}"]
    parts += [f"{label} {fmt.format(metrics[key])}" for key, label, fmt in FIELDS
              if key in metrics]
    return " | ".join(parts)


class StepSummaryCallback(L.Callback):
    @rank_zero_only
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        metrics = pl_module.last_metrics if isinstance(pl_module, PolicyTrainer) else None
        if not metrics:
            return
        line = format_summary(pl_module.policy_version, metrics)
        bar = trainer.progress_bar_callback
        if bar is not None and hasattr(bar, "print"):
            bar.print(line)
        else:
            print(line, flush=True)
