"""The run length (``trainer.max_steps``), chosen on held-out scenes, not on the reported ones.

    python scripts/fit.py -m seed=0,1,2 logger=csv checkpoint.every_n_steps=5 \\
        checkpoint.keep_last=-1 callbacks.sim_eval=null hydra.sweep.dir=multirun/len \\
        'hydra.sweep.subdir=seed${seed}'
    python scripts/choose_run_length.py multirun/len/seed* --out multirun/len/choice.json

Every step checkpoint (``RUN/checkpoints/step-NNNNNN.ckpt``, ``callbacks/preemption.py``) of
each run (one per training seed) is scored in the simulator, success_once on ``--states``
fixed scenes of ``--eval-seed`` (default 2: neither the training scenes, ``task.eval_seed`` 0,
nor the unseen ones, ``task.unseen_eval_seed`` 1, which docs/results.md's figures are measured on;
those two are refused). Step 0 is the base policy (no checkpoint). For each step held by every
run it prints the success per run and the mean +- standard error over runs, and picks the step
with the highest mean (a tie goes to the shorter run); one JSON line holds it all.

With a constant learning rate (``algorithm.lr_schedule=constant``, the default) the step-N
checkpoint of a longer run is the policy a run with ``trainer.max_steps=N`` ends with, so the
choice carries over to the shorter run. Hydra overrides after the flags go to
``conf/eval.yaml`` (``policy=...``, ``num_envs=...``), as in ``scripts/eval.py``. The logic is
``wmrl/eval/run_length.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.config import ConfigError
from wmrl.eval.run_length import score, step_lines
from wmrl.io.atomic import write_text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="scripts/fit.py run dirs, one per training seed")
    p.add_argument("--eval-seed", type=int, default=2, help="the held-out scene set")
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--out", default=None, help="write the JSON here too")
    args, overrides = p.parse_known_args(argv)
    try:
        out = score(args.runs, args.eval_seed, args.states, overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    print("\n".join(step_lines(out)))
    print(json.dumps(out))
    if args.out:
        write_text(args.out, json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
