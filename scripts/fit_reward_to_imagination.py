"""Fine-tune a reward checkpoint on the world model's imagination of real episodes.

    python scripts/fit_reward_to_imagination.py data_dir=DATA out_dir=OUT \
        [reward_dir=REWARD_DIR] [world_model_dir=WM_DIR] [steps=300]

Each episode of ``data_dir`` (scripts/collect.py datasets) is replayed open loop in the world
model from its first frame; each imagined frame is labelled with the simulator's success label
of the same step; a stratified ``holdout`` share of the episodes scores the reward before and
after the fine-tune (wmrl/finetune/reward_on_imagination.py). Output: ``OUT/model.safetensors``
+ ``OUT/config.json`` (the source checkpoint's architecture) + ``OUT/metrics.json``, each
written atomically; ``reward.checkpoint=OUT`` loads it in a fit. The logic:
``fit_and_save`` in wmrl/finetune/reward_on_imagination.py.
"""

from __future__ import annotations

import hydra
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (registers the ${wmrl_assets:} resolver the config uses)
from wmrl.errors import exit_on_config_error
from wmrl.finetune.reward_on_imagination import fit_and_save


@hydra.main(version_base="1.3", config_path="../conf", config_name="fit_reward_to_imagination")
def main(cfg) -> None:
    m = exit_on_config_error(fit_and_save, OmegaConf.to_container(cfg, resolve=True))
    b, a = m["before"], m["after"]
    print(f"reward on {m['held_out_episodes']} held-out replays: episode precision "
          f"{b['episode_precision']:.2f} -> {a['episode_precision']:.2f}, recall "
          f"{b['episode_recall']:.2f} -> {a['episode_recall']:.2f}, frame AUROC "
          f"{b['frame_auroc']:.3f} -> {a['frame_auroc']:.3f}; saved {cfg.out_dir}",
          flush=True)


if __name__ == "__main__":
    main()
