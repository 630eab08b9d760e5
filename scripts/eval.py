"""Evaluate a policy in the tabletop simulator or LIBERO (success_once on fixed initial states).

    python scripts/eval.py                                           # shipped SFT policy
    python scripts/eval.py ckpt_path=outputs/.../checkpoints/last.ckpt  # after GRPO
    python scripts/eval.py policy.pretrained_path=DIR temperature=1.6 num_videos=2 out_dir=OUT
    python scripts/eval.py sim=libero tasks=[libero_spatial/0,libero_goal/3] policy=...  # LIBERO

``sim=libero`` (conf/sim/libero.yaml, ``make libero``) swaps the tabletop (``env``) for LIBERO's
50 fixed initial states per task; ``tasks`` then names LIBERO tasks (a suite alone: all of it).

The policy is built from the ``policy`` config group; ``ckpt_path`` then loads a Lightning
checkpoint written by ``scripts/fit.py`` (GRPOModule state dict, keys ``policy.<...>``) into
it with ``torch.load(weights_only=True)``. A checkpoint trained with another policy config
(its ``wmrl_config["policy"]``) is refused: pass the fit's ``policy=...`` and ``policy.*``
overrides. Prints a per-task table and one JSON line; a config error is one line on stderr
and exit code 2. The logic is ``wmrl/eval/results.py``.
"""

from __future__ import annotations

import json
import sys

import hydra
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (registers the ${wmrl_assets:} resolver)
from wmrl.config import ConfigError
from wmrl.eval.results import run_eval


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg) -> None:
    try:
        out, table = run_eval(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(2)
    print(table)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
