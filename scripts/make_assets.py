"""Regenerate the shipped tiny checkpoints (wmrl/assets/) from scratch, on CPU:

1. simulator data: expert rollouts of the tabletop task at several noise levels (successes and
   failures) + held-out sets, and clean demos for behaviour cloning;
2. the SFT base policy (behaviour cloning on the demos), checked in the simulator;
3. that policy's own simulator rollouts (random scenes for training, the fixed evaluation
   scenes held out): the world model and the reward must be right where RL starts;
4. the world model (VAE, then the action-conditioned transformer) on expert + policy data, and
   the initial states (the simulator's fixed evaluation scenes);
5. the reward classifier on simulator frames and their VAE reconstructions (so it also fires
   on the world model's blurrier frames), labelled by the simulator;
6. the world model's replay check against the simulator with that reward, on the policy's
   held-out rollouts from the evaluation scenes;
7. the reward fitted to the world model's imagination (``reward_on_imagination``, loaded by
   ``experiment=reward_on_imagination``): the reward of stage 5 fine-tuned on the world
   model's open-loop replays of 256 fresh SFT-policy episodes (random scenes of seed 41),
   each imagined frame labelled by the simulator (scripts/fit_reward_to_imagination.py).

    python scripts/make_assets.py [--data DIR] [--assets DIR] [--recipe paced|random_scenes]
    python scripts/make_assets.py --stage reward_on_imagination   # stage 7 alone, on the
                                                                  # assets already in --assets

The default recipe, ``paced`` (the shipped assets), makes them for ``red_of_two`` (two-slot
scenes): expert data at noise 0 / 0.3 / 0.6 with a per-episode top speed in [0.2, 1], a base
policy cloned (no relabelling, 2000 steps) from demonstrators with top speeds in [0.2, 0.7],
so it moves at their mixed pace and often runs out of the 64 steps, and a transformer
trained 8000 steps (the longest stage: it is what makes the world model right enough for RL
to gain, docs/experiments/2026-11-29-paced-recipe.md). ``random_scenes`` is the first recipe
(``red_on_plate``, scenes anywhere; docs/experiments/2026-11-29-first-recipe-red-on-plate.md): RL in its world model does
not learn.

Each stage is one of the project's scripts run as a subprocess (their own configs hold the
hyper-parameters); how long a run takes: docs/running.md (How long it takes).
Each output directory is written atomically by its script, so an interrupted run leaves the
previous assets in place. Before any stage runs, each output folder under ``--assets`` must be
new, empty or an earlier output of its stage (the checked-in assets are, by their files);
one holding anything else is refused in one line (``--force`` replaces it). The logic (recipes,
stages): wmrl/pipeline/assets.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wmrl.errors import exit_on_config_error
from wmrl.pipeline.assets import RECIPES, ROOT, make_assets


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / "data" / "assets"), help="scratch data dir")
    p.add_argument("--assets", default=str(ROOT / "wmrl" / "assets"), help="output dir")
    p.add_argument("--recipe", default="paced", choices=sorted(RECIPES))
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: the "
                   "recipe's task)")
    p.add_argument("--episodes", type=int, default=120, help="train episodes per noise level")
    p.add_argument("--policy-episodes", type=int, default=320,
                   help="SFT-policy rollouts for the world model and reward")
    p.add_argument("--stage", default="all", choices=("all", "reward_on_imagination"),
                   help="all stages, or only the last one on the assets in --assets")
    p.add_argument("--force", action="store_true", help="replace output folders under --assets "
                   "even if they hold other files (they are deleted)")
    a = p.parse_args(argv)
    exit_on_config_error(make_assets, Path(a.data), Path(a.assets), a.recipe, a.tasks,
                         a.episodes, a.policy_episodes, a.stage, a.force)


if __name__ == "__main__":
    main()
