"""Learning figures over training seeds: what RL in the world model bought, as a distribution.

    python scripts/fit.py -m seed=0,1,2 logger=csv hydra.sweep.dir=multirun/fit
    python scripts/seed_report.py multirun/fit/*        # one run dir per seed

Reads each run's ``sim_eval/history.jsonl`` (``SimEvalCallback``) and, for the exploitation
signal, its csv log. Prints one line per run, then the mean +- standard error over runs
(SE = sample std / sqrt(n)) with the 95% t-interval of the mean and n (``wmrl.measure.stats``), and
one JSON line with every figure:

* ``gain_train``: simulator success at the last eval minus step 0, on the scenes the world
  model starts from (the training scenes); ``gain_unseen``: the same on the unseen scene set
  (``callbacks.sim_eval.unseen_eval_seeds``), scored at start and end only;
* ``wm_gap``: world model's success (its rollouts since the previous eval) minus the
  simulator's at each eval after step 0; ``max_abs_wm_gap`` the largest over evals;
* ``paired_gap``: ``sim/paired_gap`` at each eval, the world model's success minus the
  simulator's of the same policy on the same scenes (``callbacks.sim_eval.side_by_side``);
  ``max_abs_paired_gap`` the largest over runs and evals;
* ``replay_precision``: ``sim/paired_replay_precision`` at each eval, the share of the world
  model's imagined successes whose actions succeed replayed in the simulator;
  ``min_replay_precision`` the lowest;
* ``signal``: Pearson r, over every (run, eval interval), of the interval's mean
  ``--signal`` metric (default ``wm/fragile_success``, ``env.resample_check``) against the
  interval's ``wm_gap`` and against its simulator gain; how well a simulator-free number
  tracks the world model running away from the simulator;
* ``gain_held_out``: the last checkpoint minus the base policy on the held-out scenes
  (``eval_seed`` 2, the set choices are made on), when ``scripts/score_held_out.py`` has
  written the run's ``held_out.json``;
* ``real_episodes``: the simulator episodes a run trained on (``pace/summary.json``, written
  by ``wmrl.pace.round.Pace``; 0 for a run without PACE): its simulator budget, to set beside the
  oracle's (``experiment=sim_oracle``: every rollout is real).

``--against BASELINE_RUNS...`` compares two arms seed by seed: each run is paired with the
baseline run of the same training seed (``seed`` in each run's ``config.yaml``), and
``paired.<gain>`` holds the differences (this arm minus the baseline) with their mean +- SE and
the seeds they come from (a pair counts where both runs have the gain, e.g. both scored held out).
Runs of one seed start alike and share their sampling noise, so the paired difference is the
fairer test of an arm than two means side by side.

    python scripts/seed_report.py multirun/pace/* --against multirun/fit/*

The logic is ``wmrl/eval/seed_report.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.eval.seed_report import report, report_lines
from wmrl.measure.run_logs import RunLogError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run dirs of scripts/fit.py (one per seed)")
    ap.add_argument("--signal", default="wm/fragile_success",
                    help="a per-step metric to relate to the world model / simulator gap")
    ap.add_argument("--against", nargs="+", metavar="BASELINE_RUN",
                    help="baseline run dirs: print this arm minus the baseline, paired by seed")
    args = ap.parse_args(argv)
    try:
        res = report(args.runs, args.signal, args.against)
    except RunLogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(res)))
    print(json.dumps(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
