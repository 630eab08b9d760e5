"""Collect tabletop rollouts (scripted expert, or a policy) into a trajectory dataset.

    python scripts/collect.py                                   # conf/sim/tabletop.yaml
    python scripts/collect.py collect.out_dir=data/noisy expert.noise_std=0.8 \
        collect.episodes_per_task=200 env.image_size=[32,32]

Arguments are OmegaConf dot-list overrides of conf/sim/tabletop.yaml (``--config`` picks
another file). The output format is documented in wmrl/sim/dataset.py. A ``collect.out_dir``
holding anything but an earlier collection is refused in one line before any work
(``collect.overwrite=true`` writes there anyway; an earlier collection needs it too). The
logic: wmrl/sim/collect.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wmrl.errors import exit_on_config_error
from wmrl.sim.collect import collect, load_config

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "conf/sim/tabletop.yaml"))
    p.add_argument("overrides", nargs="*", help="dot-list overrides, e.g. expert.noise_std=0.5")
    args = p.parse_args(argv)
    print(json.dumps(exit_on_config_error(collect, load_config(args.config, args.overrides))))


if __name__ == "__main__":
    main()
