"""One metric of two runs compared step by step (``scripts/compare_runs.py``): the figures of
``wmrl.measure.run_logs.compare`` (Pearson's r over the common steps, the mean and final difference
B - A, Welch's t-test over the last ``window`` common steps), a readable line and a PNG."""

from __future__ import annotations

import math
import os
import re

from wmrl.io.atomic import atomic_path
from wmrl.measure.run_logs import Series, align, compare, read_metric


def compare_runs(run_a: str, run_b: str, metric: str = "rollout/success", window: int = 20,
                 out: str | None = None) -> dict:
    """``compare``'s figures of ``metric`` in two run dirs (or metrics csvs), with ``plot``: the
    PNG's path (default ``compare_<metric>.png`` in the current dir). A missing log or metric
    raises ``RunLogError`` before anything is written."""
    a, b = read_metric(run_a, metric), read_metric(run_b, metric)
    res = compare(a, b, window=window)
    out = out or f"compare_{re.sub(r'[^A-Za-z0-9_.-]+', '_', metric)}.png"
    res["plot"] = plot(a, b, res, out)
    return res


def plot(a: Series, b: Series, res: dict, path: str) -> str:
    """Both curves and their difference (B - A), the t-test's window shaded, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, va, vb = align(a, b)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    top.plot(a.steps, a.values, label=f"A {a.label}", color="tab:blue")
    top.plot(b.steps, b.values, label=f"B {b.label}", color="tab:orange")
    for ax in (top, bottom):
        ax.axvspan(res["window_first_step"], res["last_step"], color="0.9", zorder=0)
        ax.grid(alpha=0.3)
    top.set_ylabel(a.metric)
    top.set_title(f"{a.metric}: r {_fmt(res['pearson'])}, last {res['window_n']} common "
                  f"steps (shaded) p {_fmt(res['p_value'], '.3g')}", fontsize=10)
    top.legend(fontsize=8)
    bottom.plot(steps, vb - va, color="tab:green")
    bottom.axhline(0.0, color="0.5", lw=0.8)
    bottom.set_ylabel("B - A")
    bottom.set_xlabel("step")
    fig.tight_layout()
    with atomic_path(path) as tmp:  # the format by the path's suffix, png without one
        fig.savefig(tmp, dpi=100, format=os.path.splitext(path)[1].lstrip(".") or "png")
    plt.close(fig)
    return path


def _fmt(v: float, spec: str = ".3f") -> str:
    return "nan" if v is None or math.isnan(v) else format(v, spec)


def summary_line(r: dict) -> str:
    """The readable line of ``compare_runs``'s figures."""
    return (f"{r['metric']}: {r['n_common']} common steps ({r['first_step']}..{r['last_step']})"
            f" | pearson {_fmt(r['pearson'])} | mean diff (B-A) {_fmt(r['mean_diff'], '+.4f')}"
            f" | final diff {_fmt(r['final_diff'], '+.4f')} (A {_fmt(r['final_a'], '.4f')},"
            f" B {_fmt(r['final_b'], '.4f')}) | last {r['window_n']} steps: A "
            f"{_fmt(r['window_mean_a'], '.4f')} vs B {_fmt(r['window_mean_b'], '.4f')},"
            f" Welch t {_fmt(r['welch_t'], '.3f')} df {_fmt(r['welch_df'], '.1f')}"
            f" p {_fmt(r['p_value'], '.4g')} | plot {r['plot']}")


def json_safe(r: dict) -> dict:  # NaN / inf are not JSON
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in r.items()}
