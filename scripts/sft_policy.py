"""Behaviour-clone (SFT) the tiny OpenVLA-OFT on tabletop demos, save it, check it in the sim.

    python scripts/collect.py collect.out_dir=/tmp/demos collect.episodes_per_task=150
    python scripts/sft_policy.py data_dir=/tmp/demos [out_dir=...] [steps=3000] \
        [episodes_per_task=50] [eval.episodes_per_task=256]

Writes ``out_dir`` in the OpenVLA-OFT layout (``build_policy(pretrained_path=out_dir,
unnorm_key=<unnorm_key>)`` loads it) plus ``sft_metrics.json`` (training curve, simulator
success per task at the eval temperature, and the fraction of GRPO-style groups with mixed
outcomes at the RL temperature). Targets and statistics: ``wmrl/pipeline/sft.py``; the run:
``wmrl/pipeline/sft_policy.py``. An ``out_dir`` holding anything but a policy wmrl wrote is
refused in one line before any work (``overwrite=true`` replaces it).
"""

from __future__ import annotations

import json

import hydra
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (registers the ${wmrl_assets:} resolver the config uses)
from wmrl.errors import exit_on_config_error
from wmrl.pipeline.sft_policy import train_sft_policy


@hydra.main(version_base="1.3", config_path="../conf", config_name="sft_policy")
def main(cfg) -> None:
    m = exit_on_config_error(train_sft_policy, OmegaConf.to_container(cfg, resolve=True))
    print(json.dumps({k: v for k, v in m.items() if k != "curve"}))


if __name__ == "__main__":
    main()
