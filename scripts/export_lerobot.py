"""Our demonstrations (a scripts/collect.py trajectory dataset) written as a LeRobot dataset.

    python scripts/export_lerobot.py data/tabletop --out data/tabletop_lerobot \
        [--version v3.0|v2.1] [--camera-key observation.images.front] [--fps 20] [--crf 30]

Frames as the camera's mp4 video, actions (7-D), the privileged state, per-frame success
(``next.success``) and the task text, one episode at a time. ``--fps`` defaults to the rate
the dataset was collected at (its meta.json env.control_dt; 10 where it has none). Prints one
JSON line (episodes, frames, path, ...); a bad dataset, or an --out holding anything but an
earlier export (``--force`` replaces it), is refused in one line, exit code 2, with nothing
written. The logic and the row mapping:
``wmrl/pipeline/lerobot_export.py``.
"""

from __future__ import annotations

import argparse
import json
import sys

from wmrl.errors import ConfigError
from wmrl.lerobot.dataset import VERSIONS
from wmrl.pipeline.lerobot_export import export_lerobot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", help="a trajectory dataset directory (meta.json, episodes-*.safetensors)")
    p.add_argument("--out", required=True,
                   help="the LeRobot dataset to write (new, empty or an earlier export)")
    p.add_argument("--force", action="store_true",
                   help="replace --out even if it holds other files (they are deleted)")
    p.add_argument("--version", default="v3.0", choices=VERSIONS, help="LeRobot layout")
    p.add_argument("--camera-key", default="observation.images.front",
                   help="the video feature's name")
    p.add_argument("--fps", type=int, default=None,
                   help="frames per second (default: the dataset's control rate, else 10)")
    p.add_argument("--crf", type=int, default=30, help="video quality, lower is better")
    a = p.parse_args(argv)
    try:
        info = export_lerobot(a.src, a.out, a.version, a.camera_key, a.fps, a.crf, a.force)
    except ConfigError as err:
        print(f"export_lerobot: {err}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
