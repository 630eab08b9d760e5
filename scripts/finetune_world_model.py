"""Fine-tune an EXISTING action-conditioned Wan world model on your episodes (a LeRobot dataset
or trajectory datasets; full or LoRA; a Lightning Trainer with checkpoints and resume); export
it. To build the tiny tabletop world model from scratch (the shipped asset) use
scripts/train_world_model.py instead. Both train through the one world-model trainer,
``WorldModelFinetune`` (wmrl/finetune/world_model_module.py): here under a Trainer.

    python scripts/finetune_world_model.py world_model.path=wmrl/assets/world_model \
        data.paths=[my_lerobot_dataset] out_dir=my_world_model
    python scripts/finetune_world_model.py ... lora.rank=16               # LoRA on the DiT
    python scripts/finetune_world_model.py ... ckpt_path=last hydra.run.dir=<run>   # resume

Prints the loss per step and, every ``trainer.val_check_interval`` steps, the held-out
``val/psnr``, ``val/ssim`` (beside the copy-the-last-frame baseline) and ``val/loss``, then
the first ``module.horizon_episodes`` held-out episodes replayed open loop over the whole
episode (one line per chunk, as scripts/wm_report.py prints; the last chunk's figures logged
as ``val/horizon_*``); writes
``<run_dir>/csv/`` (metrics), ``<run_dir>/videos/step_N.gif`` (imagined | real),
``<run_dir>/checkpoints/last.ckpt`` and, at the end, the world model at ``out_dir``
(``env.world_model.path=<out_dir>`` in ``scripts/fit.py``). The logic is
wmrl/finetune/world_model_fit.py; wmrl/finetune/world_model_module.py has the module,
wmrl/world_model/objective.py the objective.
"""

import hydra
from omegaconf import DictConfig

from wmrl.errors import exit_on_config_error
from wmrl.eval.wm_fidelity import fidelity_report
from wmrl.finetune.world_model_fit import finetune_world_model


@hydra.main(config_path="../conf", config_name="finetune_world_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    exit_on_config_error(finetune_world_model, cfg, horizon_report=fidelity_report)


if __name__ == "__main__":
    main()
