"""Judge a reward model against ground-truth success labels (torchmetrics, no model code).

* ``confusion_counts``: TP, FP, TN, FN of 0/1 predictions (``torchmetrics``'
  ``binary_stat_scores``), the one confusion count of the pipeline.
* ``binary_metrics``: precision = TP/(TP+FP), recall = TP/(TP+FN), F1 = 2PR/(P+R),
  accuracy, on ``score >= threshold`` (0/0 counts as 0).
* ``ranking_metrics``: AUROC and the expected calibration error (torchmetrics).
* ``score_histogram``: counts of scores in equal bins over [0, 1].
* ``trajectory_success``: success_once per trajectory from per-frame scores,
  ``max_t score_t >= threshold`` (the env's rule, threshold 0.9).
* ``zero_variance_fraction``: the share of GRPO groups (``group_size`` consecutive
  trajectories) whose rewards are all equal: their advantages are 0, so they carry no
  gradient (the published ResNet reward leaves ~71% of samples so).
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


def score_histogram(scores: torch.Tensor, bins: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts [bins], edges [bins + 1]) over [0, 1]; a score of exactly 1 falls in the last bin."""
    scores = torch.as_tensor(scores, dtype=torch.float32).flatten()
    edges = torch.linspace(0.0, 1.0, bins + 1)
    idx = (scores.clamp(0.0, 1.0) * bins).long().clamp_(max=bins - 1)
    return torch.bincount(idx, minlength=bins), edges


def trajectory_success(frame_scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """bool [N] from scores [N, T]: success once any frame reaches ``threshold``."""
    return torch.as_tensor(frame_scores).amax(dim=-1) >= threshold


def zero_variance_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose ``group_size`` rewards are all equal (zero GRPO advantage)."""
    rewards = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"zero_variance_fraction: {rewards.numel()} rewards do not split into "
                         f"groups of {group_size}")
    groups = rewards.view(-1, group_size)
    flat = (groups.amax(dim=1) - groups.amin(dim=1)) == 0
    return float(flat.float().mean())


def reward_report(frame_scores: torch.Tensor, frame_labels: torch.Tensor,
                  group_size: int | None = None, *, success_threshold: float,
                  bins: int = 10) -> dict:
    """Frame-level and trajectory-level agreement for scores/labels of shape [N, T].

    Trajectory truth is ``any(label)``; predicted success uses ``trajectory_success``. With
    ``group_size``, also the zero-variance share of the predicted binary returns.
    """
    scores = torch.as_tensor(frame_scores, dtype=torch.float32)
    labels = torch.as_tensor(frame_labels)
    pred_traj = trajectory_success(scores, success_threshold)
    report = {
        "frame": {**binary_metrics(scores, labels, 0.5), **ranking_metrics(scores, labels)},
        "trajectory": {**binary_metrics(pred_traj.float(), labels.bool().any(dim=-1), 0.5),
                       "auroc": ranking_metrics(scores.amax(dim=-1),
                                                labels.bool().any(dim=-1))["auroc"]},
        "histogram": score_histogram(scores, bins)[0].tolist(),
    }
    if group_size:
        report["zero_variance_fraction"] = zero_variance_fraction(pred_traj.float(), group_size)
    return report
