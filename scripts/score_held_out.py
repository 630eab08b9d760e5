"""Score each fit run's last checkpoint, and the base policy, on the held-out scenes.

    python scripts/score_held_out.py RUN [RUN ...] [--eval-seed 2] [--states 256] [--force] [eval overrides]
    python scripts/seed_report.py ARM/seed* --against DEFAULT/seed*   # then reads gain_held_out

``eval_seed`` 2 is the scene set choices are made on (an arm becomes the default only if it
wins there, paired by seed); the training and unseen sets, and a training pool's seed, are
refused (``wmrl.eval.held_out``). Writes ``RUN/held_out.json`` (base and trained success,
the scenes); a run already scored on the same scenes is not rescored unless ``--force``.
Prints one line per run and one JSON line; a config error is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.config import ConfigError
from wmrl.eval.held_out import held_out_config, score_runs


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="scripts/fit.py run dirs")
    p.add_argument("--eval-seed", type=int, default=2, help="the held-out scene set")
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--force", action="store_true", help="rescore runs already scored")
    args, overrides = p.parse_known_args(argv)
    try:
        cfg = held_out_config(args.eval_seed, args.states, overrides, "score the runs")
        out = score_runs(args.runs, cfg, force=args.force)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    for run, r in out.items():
        print(f"{run}: {100 * r['success']:.1f} (base {100 * r['base_success']:.1f}, "
              f"gain {100 * (r['success'] - r['base_success']):+.1f}) on {r['states']} scenes "
              f"of eval_seed {r['eval_seed']}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
