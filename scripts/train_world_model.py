"""Build the tiny action-conditioned Wan world model FROM SCRATCH on simulator trajectories
(the shipped asset, ``make assets``). To adapt an existing world model to your episodes (a
LeRobot dataset, LoRA, a Trainer with checkpoints and resume) use
scripts/finetune_world_model.py instead. Both train through the one world-model trainer,
``WorldModelFinetune`` (wmrl/finetune/world_model_module.py): here without a Trainer, on
cached clips.

    python scripts/train_world_model.py train_dirs=[DATA1,DATA2] val_dirs=[VAL] out_dir=OUT \
        [eval.reward_checkpoint=REWARD_DIR] [initial_states.out_dir=STATES_DIR]

Stages: the VAE (the trainer's ``part=vae``, ``vae_train``; or reuse ``vae_from``) -> latent
statistics -> cache clip latents -> the DiT + action modules (``part=dit``,
``transformer_train``) -> save_pretrained(OUT) -> metrics (VAE and next-chunk PSNR/SSIM vs the
copy-last-frame baseline; with a reward checkpoint, open-loop replay of held-out episodes
through WanWorldModelEnv: world-model vs simulator success) -> OUT/metrics.json. Config:
conf/train_world_model.yaml; the logic is wmrl/finetune/world_model_build.py.
"""

from __future__ import annotations

import hydra
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (registers the ${wmrl_assets:} resolver env: interpolates)
from wmrl.errors import exit_on_config_error
from wmrl.finetune.world_model_build import build_world_model


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_world_model")
def main(cfg) -> None:
    exit_on_config_error(build_world_model, OmegaConf.to_container(cfg, resolve=True))


if __name__ == "__main__":
    main()
