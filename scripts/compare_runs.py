"""Compare one metric of two runs, step by step.

    python scripts/compare_runs.py RUN_A RUN_B [--metric rollout/success] [--window 20]
                                   [--out PNG]

RUN_A / RUN_B: a run dir of ``scripts/fit.py`` with csv logs (``logger=csv``:
``<run_dir>/csv/version_0/metrics.csv``) or a metrics csv itself. Prints a readable line, then
one JSON line with every figure (differences are B - A): Pearson's r over the common steps,
the mean and the final difference, and Welch's t-test (t, df, p) of the last ``--window``
common steps. Writes a PNG of both curves and their difference (default
``compare_<metric>.png`` in the current dir). Only csv is read (wmrl/measure/run_logs.py says why);
exit code 2 names a missing log or metric. The logic is ``wmrl/eval/compare_runs.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.eval.compare_runs import compare_runs, json_safe, summary_line
from wmrl.measure.run_logs import RunLogError


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
        res = compare_runs(args.run_a, args.run_b, args.metric, args.window, args.out)
    except RunLogError as err:
        print(f"compare_runs: {err}", file=sys.stderr)
        return 2
    print(summary_line(res))
    print(json.dumps(json_safe(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
