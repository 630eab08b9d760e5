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
``val/psnr``, ``val/ssim`` (beside the copy-the-last-frame baseline) and ``val/loss``; writes
``<run_dir>/csv/`` (metrics), ``<run_dir>/videos/step_N.gif`` (imagined | real),
``<run_dir>/checkpoints/last.ckpt`` and, at the end, the world model at ``out_dir``
(``env.world_model.path=<out_dir>`` in ``scripts/fit.py``). wmrl/finetune/world_model_module.py
has the module, wmrl/world_model/objective.py the objective.
"""

import os
import sys

import hydra
from omegaconf import DictConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import wmrl.build  # noqa: E402,F401  (registers ${wmrl_assets:})
from wmrl.config import ConfigError, resolve_ckpt_path  # noqa: E402
from wmrl.errors import exit_on_config_error  # noqa: E402
from wmrl.io.atomic import check_output_dir  # noqa: E402
from wmrl.schema import check_entry  # noqa: E402


def run(cfg: DictConfig):
    """Check the inputs, fine-tune, export; returns (trainer, module)."""
    from wmrl.build import to_container
    from wmrl.finetune.world_model_clips import WorldModelClipData
    from wmrl.finetune.world_model_module import WorldModelFinetune
    from wmrl.launch.trainer import build_trainer, start_run, stop_on_sigterm

    check_entry("finetune_world_model", resolve_ckpt_path(cfg))  # before any data or model
    check_output_dir(cfg.out_dir, "world_model", cfg.overwrite, key="out_dir")
    wm_path = cfg.world_model.get("path")
    if wm_path and not os.path.isdir(wm_path):
        raise ConfigError(f"world_model.path={wm_path!r} is not a folder: give a world-model "
                          "directory (scripts/import_rlinf.py or scripts/train_world_model.py "
                          "writes one)")
    out_dir = os.path.abspath(str(cfg.out_dir))
    start_run(cfg.seed)
    data = WorldModelClipData(**to_container(cfg.data), seed=cfg.seed)  # reads the metadata
    module = WorldModelFinetune(world_model=to_container(cfg.world_model),
                                objective=to_container(cfg.objective),
                                lora=to_container(cfg.lora) if cfg.lora else None,
                                video_dir=os.path.join(cfg.run_dir, "videos"), seed=cfg.seed,
                                **to_container(cfg.module))
    trainer = build_trainer(cfg, script="scripts/finetune_world_model.py")
    with stop_on_sigterm(trainer):  # last.ckpt of the last step, the resume command, exit 143
        if cfg.validate_first and cfg.ckpt_path is None:  # the starting model's held-out figures
            trainer.validate(module, datamodule=data, verbose=False)
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path, weights_only=True)
    if module.export(out_dir) is not None:  # every rank gathers; rank 0 writes
        print(f"world model -> {out_dir}")
    return trainer, module


@hydra.main(config_path="../conf", config_name="finetune_world_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    exit_on_config_error(run, cfg)


if __name__ == "__main__":
    main()
