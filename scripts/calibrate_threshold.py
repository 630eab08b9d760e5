"""The world model's success threshold, read closed loop against the simulator.

    python scripts/calibrate_threshold.py                         # base policy, eval_seed 2
    python scripts/calibrate_threshold.py --ckpt RUN/checkpoints/last.ckpt   # a trained policy
    python scripts/calibrate_threshold.py --out FILE.json [fit overrides, e.g. env.num_inference_steps=5]

The policy (the fit config's ``policy``, or a fit checkpoint's weights) runs closed loop in the
fit config's world-model env (``env``, ``reward``) from ``--states`` scenes of ``--eval-seed``
(default 2: neither the training scenes, ``task.eval_seed`` 0, nor the unseen ones,
``task.unseen_eval_seed`` 1), and in the simulator on the same scenes. Prints, and writes to
``--out``, one JSON object: the simulator's success, the world model's success at each
threshold (``wmrl.finetune.threshold_calibration``) and the threshold whose imagined success is
closest to the simulator's. The logic is ``wmrl/eval/success_threshold.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.config import ConfigError
from wmrl.eval.success_threshold import calibrate
from wmrl.io.atomic import write_text


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eval-seed", type=int, default=2)
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--ckpt", default=None, help="a scripts/fit.py checkpoint (.ckpt)")
    p.add_argument("--seed", type=int, default=0, help="policy sampling and env noise seed")
    p.add_argument("--out", default=None, help="write the JSON here too")
    args, overrides = p.parse_known_args(argv)
    try:
        out = calibrate(overrides, args.eval_seed, args.states, args.num_envs, args.ckpt,
                        args.seed)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    if args.out:
        write_text(args.out, json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
