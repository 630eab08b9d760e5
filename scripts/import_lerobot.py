"""Reset states from a LeRobot dataset: ``<out>/initial_states/`` (the world-model env's
``env.initial_states``) and ``<out>/dataset/`` (the same states in RLinf's ``traj*.npy`` layout).

    python scripts/import_lerobot.py DATASET --out DIR [--camera KEY] [--size 256]
        [--kir] [--keyframes 0.25 0.5]

Each episode gives its first frame as a reset state; ``--kir`` adds a keyframe state per
``--keyframes`` fraction (default 0.5): the 4 frames up to that point of the episode and their
actions as the world model's context (RLinf's KIR). The dataset is read locally (v2.1 or v3.0
layout), one episode at a time; a bad dataset, or an ``<out>/dataset/`` or
``<out>/initial_states/`` holding anything but an earlier import (``--force`` replaces them),
is refused in one line before anything is written (exit 2). Nothing else in ``--out`` is
touched. Prints one JSON line. The logic: ``wmrl/pipeline/lerobot_reset.py`` (``import_lerobot``).
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.errors import ConfigError
from wmrl.pipeline.lerobot_reset import import_lerobot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", help="a LeRobot dataset directory (meta/info.json, data/, videos/)")
    p.add_argument("--out", required=True, help="where initial_states/ and dataset/ go "
                   "(each new, empty or an earlier import; nothing else in --out is touched)")
    p.add_argument("--force", action="store_true", help="replace <out>/initial_states/ and "
                   "<out>/dataset/ even if they hold other files (they are deleted)")
    p.add_argument("--camera", default=None,
                   help="the video key of the frames (default: the dataset's only camera)")
    p.add_argument("--size", type=int, nargs="+", default=None,
                   help="frame size: S (square) or H W (default: the dataset's)")
    p.add_argument("--kir", action="store_true", help="add keyframe states (RLinf's KIR)")
    p.add_argument("--keyframes", type=float, nargs="+", default=[0.5],
                   help="with --kir: where in each episode, as fractions of its length")
    a = p.parse_args(argv)
    try:
        info = import_lerobot(a.dataset, a.out, camera=a.camera, size=a.size,
                              keyframes=a.keyframes if a.kir else (), force=a.force)
    except (ConfigError, FileNotFoundError) as err:
        print(f"import_lerobot: {err}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
