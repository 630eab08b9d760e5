"""Judge a reward model against ground-truth success labels (torchmetrics, no model code).

* ``confusion_counts``: TP, FP, TN, FN of 0/1 predictions (``torchmetrics``'
  ``binary_stat_scores``), the one confusion count of the pipeline.
* ``binary_metrics``: precision = TP/(TP+FP), recall = TP/(TP+FN), F1 = 2PR/(P+R),
  accuracy, on ``score >= threshold`` (0/0 counts as 0).
* ``ranking_metrics``: AUROC and the expected calibration error (torchmetrics).
"""

from __future__ import annotations

import torch
from torchmetrics.functional.classification import (
    binary_auroc,
    binary_calibration_error,
    binary_stat_scores,
)


def confusion_counts(pred, labels) -> tuple[int, int, int, int]:
    """(tp, fp, tn, fn) of bool or 0/1 predictions against 0/1 labels (torch or NumPy, any
    shape): tp = #(pred 1, label 1), fp = #(1, 0), tn = #(0, 0), fn = #(0, 1)."""
    pred, labels = torch.as_tensor(pred).flatten(), torch.as_tensor(labels).flatten()
    if not pred.numel():  # binary_stat_scores cannot reshape an empty batch
        return 0, 0, 0, 0
    # 0/1 predictions as torchmetrics' integer input: no threshold or sigmoid applied
    tp, fp, tn, fn, _ = (int(v) for v in binary_stat_scores(pred.long(), labels.long()))
    return tp, fp, tn, fn


def binary_metrics(scores: torch.Tensor, labels: torch.Tensor,
                   threshold: float = 0.5) -> dict[str, float]:
    scores, labels = torch.as_tensor(scores).flatten(), torch.as_tensor(labels).flatten()
    if scores.shape != labels.shape:
        raise ValueError(f"binary_metrics: {scores.numel()} scores vs {labels.numel()} labels")
    tp, fp, tn, fn = confusion_counts(scores.float() >= threshold, labels)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "accuracy": (tp + tn) / max(1, scores.numel()),
            "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def ranking_metrics(scores: torch.Tensor, labels: torch.Tensor, bins: int = 10
                    ) -> dict[str, float]:
    """Threshold-free: ``auroc`` (can a threshold separate them at all?) and ``ece``, the
    expected calibration error over ``bins`` equal-width bins (is p(success) a probability,
    as the graded return 5 * p reads it?); NaN unless both classes occur."""
    scores = torch.as_tensor(scores, dtype=torch.float32).flatten()
    labels = torch.as_tensor(labels).flatten().long()
    if not 0 < int(labels.sum()) < labels.numel():
        return {"auroc": float("nan"), "ece": float("nan")}
    return {"auroc": float(binary_auroc(scores, labels)),
            "ece": float(binary_calibration_error(scores.clamp(0, 1), labels, n_bins=bins))}
