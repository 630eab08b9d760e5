"""Train a ResNet success reward from frames + success labels.

    python scripts/train_reward.py data_dir=DATA out_dir=OUT [arch=resnet_task] [steps=...]
    python scripts/train_reward.py data_format=lerobot data_dir=LEROBOT out_dir=OUT \
        [lerobot.camera=KEY] [lerobot.last_frames=K]
    python scripts/train_reward.py ... ckpt_path=last hydra.run.dir=<run>   # resume

Datasets: wmrl/finetune/reward_datasets.py; the trainer (class-balanced BCE on logits) and the
logic: wmrl/finetune/reward_trainer.py (``train_reward``), run through the one trainer set-up
(wmrl/launch/trainer.py: ``<run_dir>/checkpoints/last.ckpt``, also on SIGTERM, then exit 143).
Output: ``OUT/model.safetensors`` + ``OUT/config.json`` + ``OUT/metrics.json`` (atomic
writes).
"""

from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig

from wmrl.errors import exit_on_config_error
from wmrl.finetune.reward_trainer import train_reward


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_reward")
def main(cfg: DictConfig) -> None:
    print(json.dumps(exit_on_config_error(train_reward, cfg)))


if __name__ == "__main__":
    main()
