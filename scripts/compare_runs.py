"""Compare one metric of two runs, step by step.

    python scripts/compare_runs.py RUN_A RUN_B [--metric rollout/success] [--window 20]
                                   [--out PNG]

RUN_A / RUN_B: a run dir of ``scripts/fit.py`` with csv logs (``logger=csv``:
``<run_dir>/csv/version_0/metrics.csv``) or a metrics csv itself. Prints a readable line, then
one JSON line with every figure (differences are B - A): Pearson's r over the common steps,
the mean and the final difference, and Welch's t-test (t, df, p) of the last ``--window``
common steps. Writes a PNG of both curves and their difference (default
``compare_<metric>.png`` in the current dir). Only csv is read (wmrl/run_logs.py says why);
exit code 2 names a missing log or metric.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wmrl.run_logs import RunLogError, Series, align, compare, read_metric  # noqa: E402


def plot(a: Series, b: Series, res: dict, path: str) -> str:
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
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(v: float, spec: str = ".3f") -> str:
    return "nan" if v is None or math.isnan(v) else format(v, spec)


def summary_line(r: dict) -> str:
    return (f"{r['metric']}: {r['n_common']} common steps ({r['first_step']}..{r['last_step']})"
            f" | pearson {_fmt(r['pearson'])} | mean diff (B-A) {_fmt(r['mean_diff'], '+.4f')}"
            f" | final diff {_fmt(r['final_diff'], '+.4f')} (A {_fmt(r['final_a'], '.4f')},"
            f" B {_fmt(r['final_b'], '.4f')}) | last {r['window_n']} steps: A "
            f"{_fmt(r['window_mean_a'], '.4f')} vs B {_fmt(r['window_mean_b'], '.4f')},"
            f" Welch t {_fmt(r['welch_t'], '.3f')} df {_fmt(r['welch_df'], '.1f')}"
            f" p {_fmt(r['p_value'], '.4g')} | plot {r['plot']}")


def _json_safe(r: dict) -> dict:  # NaN / inf are not JSON
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in r.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_a", help="run dir or metrics csv (A)")
    p.add_argument("run_b", help="run dir or metrics csv (B)")
    p.add_argument("--metric", default="rollout/success")
    p.add_argument("--window", type=int, default=20,
                   help="last N common steps for the Welch t-test (default 20)")
    p.add_argument("--out", help="PNG path (default compare_<metric>.png)")
    args = p.parse_args(argv)
    if args.window < 1:
        p.error("--window must be >= 1")
    try:
        a = read_metric(args.run_a, args.metric)
        b = read_metric(args.run_b, args.metric)
        res = compare(a, b, window=args.window)
    except RunLogError as err:
        print(f"compare_runs: {err}", file=sys.stderr)
        return 2
    out = args.out or f"compare_{re.sub(r'[^A-Za-z0-9_.-]+', '_', args.metric)}.png"
    res["plot"] = plot(a, b, res, out)
    print(summary_line(res))
    print(json.dumps(_json_safe(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
