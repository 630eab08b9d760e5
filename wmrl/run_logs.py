"""Read a run's logged metrics back and compare two runs (``scripts/compare_runs.py``).

A run is a run dir written by ``scripts/fit.py`` with ``logger=csv``
(``<run_dir>/csv/version_<n>/metrics.csv``, Lightning's CSVLogger) or such a csv file itself
(also a wandb history exported to csv: ``trainer/global_step`` stands in for ``step``).
Only csv is read: wandb 0.31 ships no reader for its offline ``.wandb`` files (the Python
``wandb.sdk.internal.datastore`` is gone; wandb-core, in Go, reads them), so a wandb-only run
dir is named as such, with how to export it (``docs/running.md``, "What a run records, and comparing two runs").

Statistics use numpy and ``math`` only: Pearson's r over the common steps, the mean and final
difference (B - A), and Welch's two-sample t-test over the last ``window`` common steps (its
two-sided p-value from the regularized incomplete beta function).
"""

from __future__ import annotations

import csv
import glob
import math
import os
import re
from dataclasses import dataclass

import numpy as np

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


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN with fewer than 2 points or a constant series."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / den if den > 0 else math.nan


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or math.isnan(df):
        return math.nan
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def welch(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Welch's t-test of mean(y) - mean(x): ``t``, ``df``, two-sided ``p``. Two constant
    samples: p = 1 if their means are equal, else 0 (df NaN); fewer than 2 each: all NaN."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    nx, ny = len(x), len(y)
    if nx < 2 or ny < 2:
        return {"t": math.nan, "df": math.nan, "p": math.nan}
    vx, vy = float(x.var(ddof=1)) / nx, float(y.var(ddof=1)) / ny
    diff = float(y.mean() - x.mean())
    if vx + vy == 0.0:
        return {"t": 0.0 if diff == 0 else math.copysign(math.inf, diff), "df": math.nan,
                "p": 1.0 if diff == 0 else 0.0}
    t = diff / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (nx - 1) + vy ** 2 / (ny - 1))
    return {"t": t, "df": df, "p": t_two_sided_p(t, df)}


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
