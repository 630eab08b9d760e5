"""The project's statistics, all from ``scipy.stats`` (no hand-written distributions).

* ``wilson(k, n)``: the 95% Wilson score interval of a success rate of k in n episodes
  (``binomtest(k, n).proportion_ci(method="wilson")``); 113 of 256 (44.1%) is [38.2, 50.3].
* ``mean_se(values)``: the mean and its standard error, SE = sample std / sqrt(n).
* ``t_interval(values)``: mean +- t_{0.975, n-1} SE, the 95% interval of a mean over seeds
  (NaN bounds for n < 2).
* ``welch(x, y)``: Welch's two-sample t-test of mean(y) - mean(x) (``ttest_ind``,
  ``equal_var=False``), with the two degenerate cases named.
* ``pearson(x, y)``: Pearson's r (``pearsonr``); NaN for fewer than 2 points or a constant
  series.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``k / n``; (NaN, NaN) for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def rate_with_interval(k: int, n: int) -> str:
    """``"44.1% [38.2, 50.3]"``: a success rate in percent with its 95% Wilson interval."""
    lo, hi = wilson(k, n)
    return f"{100 * k / max(n, 1):.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error); SE is NaN for a single value."""
    v = np.asarray(values, dtype=float)
    se = float(stats.sem(v)) if len(v) > 1 else math.nan
    return float(v.mean()), se


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE
               ) -> tuple[float, float, float]:
    """(mean, low, high): the ``confidence`` t-interval of the mean of ``values``."""
    m, se = mean_se(values)
    if not math.isfinite(se):
        return m, math.nan, math.nan
    if se == 0.0:
        return m, m, m
    lo, hi = stats.t.interval(confidence, len(values) - 1, loc=m, scale=se)
    return m, float(lo), float(hi)


def welch(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Welch's t-test of mean(y) - mean(x): ``t``, ``df``, two-sided ``p``. Two constant
    samples: p = 1 if their means are equal, else 0 (df NaN); fewer than 2 each: all NaN."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        return {"t": math.nan, "df": math.nan, "p": math.nan}
    if x.var() == 0.0 and y.var() == 0.0:
        diff = float(y.mean() - x.mean())
        return {"t": 0.0 if diff == 0 else math.copysign(math.inf, diff), "df": math.nan,
                "p": 1.0 if diff == 0 else 0.0}
    res = stats.ttest_ind(y, x, equal_var=False)
    return {"t": float(res.statistic), "df": float(res.df), "p": float(res.pvalue)}


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r; NaN with fewer than 2 points or a constant series."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or x.std() == 0.0 or y.std() == 0.0:
        return math.nan
    with warnings.catch_warnings():  # two points: r is +-1, scipy warns that p is undefined
        warnings.simplefilter("ignore")
        return float(stats.pearsonr(x, y).statistic)
