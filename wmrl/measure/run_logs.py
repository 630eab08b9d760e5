"""Read a run's logged metrics back and compare two runs (``scripts/compare_runs.py``).

A run is a run dir written by ``scripts/fit.py`` with ``logger=csv``
(``<run_dir>/csv/version_<n>/metrics.csv``, Lightning's CSVLogger) or such a csv file itself
(also a wandb history exported to csv: ``trainer/global_step`` stands in for ``step``).
Only csv is read: wandb 0.31 ships no reader for its offline ``.wandb`` files (the Python
``wandb.sdk.internal.datastore`` is gone; wandb-core, in Go, reads them), so a wandb-only run
dir is named as such, with how to export it (``docs/running.md``, "What a run records, and comparing two runs").

Statistics (``wmrl.measure.stats``, scipy): Pearson's r over the common steps, the mean and final
difference (B - A), and Welch's two-sample t-test over the last ``window`` common steps.
"""

from __future__ import annotations

import csv
import glob
import math
import os
import re
from dataclasses import dataclass

import numpy as np

from wmrl.measure.stats import pearson, welch

STEP_COLUMNS = ("step", "trainer/global_step")  # CSVLogger's; WandbLogger's, in an export
EXPORT_HINT = ("only csv logs are read (wandb 0.31 has no reader for offline .wandb files): "
               "run with logger=csv, or export the wandb run to csv (docs/running.md, "
               "'What a run records, and comparing two runs')")


class RunLogError(ValueError):
    """A run's log is missing or lacks the metric (the message says which)."""


@dataclass
class Series:
    """One metric of one run: ``values[i]`` logged at ``steps[i]`` (sorted, unique)."""

    label: str
    path: str
    metric: str
    steps: np.ndarray
    values: np.ndarray


def find_metrics_csv(run: str) -> str:
    """The metrics csv of ``run``: the file itself, or under a run dir
    ``csv/version_<n>/metrics.csv`` (highest n), else any ``**/metrics.csv`` (one only)."""
    if os.path.isfile(run):
        return run
    if not os.path.isdir(run):
        raise RunLogError(f"{run}: no such file or run dir")

    def version(p: str) -> int:
        m = re.search(r"version_(\d+)", p)
        return int(m.group(1)) if m else -1

    found = sorted(glob.glob(os.path.join(run, "csv", "version_*", "metrics.csv")), key=version)
    if found:
        return found[-1]
    found = sorted(glob.glob(os.path.join(run, "**", "metrics.csv"), recursive=True))
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise RunLogError(f"{run}: several metrics.csv, name one: " + ", ".join(found))
    if glob.glob(os.path.join(run, "**", "offline-run-*", "*.wandb"), recursive=True):
        raise RunLogError(f"{run}: has only a wandb offline run; {EXPORT_HINT}")
    raise RunLogError(f"{run}: no metrics.csv under it; {EXPORT_HINT}")


def _number(cell: str | None) -> float | None:
    if cell is None or cell.strip() == "":
        return None
    try:
        v = float(cell)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def read_metric(run: str, metric: str, label: str | None = None) -> Series:
    """``metric`` by step from ``run``'s csv. Rows without a finite value of it (the csv has one
    row per log call, most cells empty) are skipped; a step logged twice (a resumed run
    re-logs the steps after its checkpoint) keeps its later row."""
    path = find_metrics_csv(run)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        step_col = next((c for c in STEP_COLUMNS if c in header), None)
        if step_col is None:
            raise RunLogError(f"{path}: no step column ({' or '.join(STEP_COLUMNS)})")
        if metric not in header:
            names = sorted(c for c in header if c not in STEP_COLUMNS)
            raise RunLogError(f"{path}: no metric {metric!r}; it has: " + ", ".join(names))
        by_step: dict[int, float] = {}
        for row in reader:
            step, value = _number(row.get(step_col)), _number(row.get(metric))
            if step is not None and value is not None:
                by_step[int(step)] = value
    if not by_step:
        raise RunLogError(f"{path}: metric {metric!r} has no finite value")
    steps = np.array(sorted(by_step), dtype=np.int64)
    values = np.array([by_step[s] for s in steps.tolist()], dtype=np.float64)
    return Series(label or run, path, metric, steps, values)


def align(a: Series, b: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(common steps, a's values there, b's values there)."""
    steps, ia, ib = np.intersect1d(a.steps, b.steps, assume_unique=True, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def compare(a: Series, b: Series, window: int = 20) -> dict:
    """All figures of ``a`` vs ``b`` on their common steps; differences are B - A; the
    Welch test compares the last ``window`` common steps of each (all of them if fewer)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    steps, va, vb = align(a, b)
    out: dict = {"metric": a.metric, "run_a": a.label, "run_b": b.label,
                 "csv_a": a.path, "csv_b": b.path, "n_a": len(a.steps), "n_b": len(b.steps),
                 "n_common": len(steps)}
    if not len(steps):
        raise RunLogError(f"{a.label} and {b.label} have no step of {a.metric!r} in common")
    wa, wb = va[-window:], vb[-window:]
    test = welch(wa, wb)
    out.update(first_step=int(steps[0]), last_step=int(steps[-1]),
               pearson=pearson(va, vb), mean_diff=float(np.mean(vb - va)),
               final_a=float(va[-1]), final_b=float(vb[-1]), final_diff=float(vb[-1] - va[-1]),
               window=window, window_n=len(wa), window_first_step=int(steps[-len(wa)]),
               window_mean_a=float(wa.mean()), window_mean_b=float(wb.mean()),
               window_diff=float(wb.mean() - wa.mean()),
               welch_t=test["t"], welch_df=test["df"], p_value=test["p"])
    return out
