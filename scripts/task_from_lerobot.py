"""Your own task from a LeRobot dataset, in one command: reset states, a reward, a world model.

    python scripts/task_from_lerobot.py /data/my_dataset --out my_task \
        --world-model wmrl/assets/world_model --size 64 [--camera KEY] [--kir] \
        [--last-frames K] [--reward-set KEY=VALUE ...] [--world-model-set KEY=VALUE ...]

Stages, each one of the project's scripts as a subprocess (their configs hold the settings;
``--reward-set`` / ``--world-model-set`` pass Hydra overrides to the last two):

1. ``scripts/import_lerobot.py``: ``<out>/initial_states/`` (each episode's first frame and
   task; with ``--kir`` keyframe states too) and ``<out>/dataset/`` (RLinf's layout);
2. ``scripts/train_reward.py data_format=lerobot``: ``<out>/reward/``, the ResNet success
   classifier on the dataset's ``next.success`` (or, ``--last-frames K``, the last K frames of
   every episode: demonstrations that record no outcome; its run dir ``<out>.runs/reward``);
3. ``scripts/finetune_world_model.py``: ``<out>/world_model/``, the world model ``--world-model``
   fine-tuned on the dataset (WoVR's objective; its run dir, for ``ckpt_path=last``, is
   ``<out>.runs/world_model``).

The inputs are checked first (the dataset's metadata and files, the camera, the world model's
files); the stages write into a temporary folder that becomes ``<out>`` only when all three
have finished, so a failed command leaves no half-made task. Then it prints the
``scripts/fit.py`` command that trains on the task. A bad input is one line on stderr and exit
code 2; a failed stage exits with the stage's code. The logic is
wmrl/pipeline/task_from_lerobot.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.errors import ConfigError
from wmrl.pipeline.task_from_lerobot import StageFailed, task_from_lerobot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dataset", type=Path, help="a LeRobot dataset folder (meta/, data/, videos/)")
    p.add_argument("--out", type=Path, required=True, help="the task folder to write (new, "
                   "empty or an earlier task)")
    p.add_argument("--force", action="store_true",
                   help="replace --out even if it holds other files (they are deleted)")
    p.add_argument("--world-model", type=Path, required=True,
                   help="the world model to start from (an imported WoVR directory, ours, ...)")
    p.add_argument("--size", type=int, nargs="+", required=True,
                   help="frame size the world model takes: S (square) or H W")
    p.add_argument("--camera", help="the video key (default: the dataset's first camera)")
    p.add_argument("--kir", action="store_true", help="keyframe reset states too (RLinf's KIR)")
    p.add_argument("--last-frames", type=int, default=None,
                   help="reward: the last K frames of each episode are its successes (for "
                        "demonstrations that record no next.success)")
    p.add_argument("--reward-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides of conf/train_reward.yaml")
    p.add_argument("--world-model-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides of conf/finetune_world_model.yaml")
    a = p.parse_args(argv)
    try:
        fit = task_from_lerobot(a.dataset, a.out, a.world_model, a.size, camera=a.camera,
                                kir=a.kir, last_frames=a.last_frames, reward_set=a.reward_set,
                                world_model_set=a.world_model_set, force=a.force)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except StageFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return err.returncode
    print(f"task -> {a.out}\nfit on it:\n  {fit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
