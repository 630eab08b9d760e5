"""Fine-tune the action-conditioned Wan world model on your episodes; export it.

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
import warnings

import hydra
from omegaconf import DictConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import wmrl.build  # noqa: E402,F401  (registers ${wmrl_assets:})
from wmrl.config import ConfigError, resolve_ckpt_path  # noqa: E402
from wmrl.errors import exit_on_config_error  # noqa: E402


def run(cfg: DictConfig):
    """Check the inputs, fine-tune, export; returns (trainer, module)."""
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from callbacks.checkpoint_io import AtomicCheckpointIO
    from callbacks.preemption import PREEMPTED_EXIT_CODE, StepCheckpoint
    from wmrl.build import build, to_container
    from wmrl.finetune.world_model_clips import WorldModelClipData
    from wmrl.finetune.world_model_module import WorldModelFinetune

    resolve_ckpt_path(cfg)
    # the frozen VAE is in eval mode on purpose
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start")
    wm_path = cfg.world_model.get("path")
    if wm_path and not os.path.isdir(wm_path):
        raise ConfigError(f"world_model.path={wm_path!r} is not a folder: give a world-model "
                          "directory (scripts/import_rlinf.py or scripts/train_world_model.py "
                          "writes one)")
    out_dir = os.path.abspath(str(cfg.out_dir))
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    data = WorldModelClipData(**to_container(cfg.data), seed=cfg.seed)  # reads the metadata
    module = WorldModelFinetune(world_model=to_container(cfg.world_model),
                                objective=to_container(cfg.objective),
                                lora=to_container(cfg.lora) if cfg.lora else None,
                                video_dir=os.path.join(cfg.run_dir, "videos"), seed=cfg.seed,
                                **to_container(cfg.module))
    strategy = build(cfg.strategy) if "_target_" in cfg.strategy else cfg.strategy.strategy
    logger = build(to_container(cfg.logger)) if cfg.get("logger") else False
    ckpt = StepCheckpoint(cfg.run_dir, keep_last=cfg.checkpoint.keep_last,
                          every_n_steps=cfg.checkpoint.every_n_steps,
                          script="scripts/finetune_world_model.py")
    trainer = L.Trainer(strategy=strategy, logger=logger, callbacks=[ckpt],
                        plugins=[AtomicCheckpointIO()], default_root_dir=cfg.run_dir,
                        **to_container(cfg.trainer))
    try:
        if cfg.validate_first and cfg.ckpt_path is None:  # the starting model's held-out figures
            trainer.validate(module, datamodule=data, verbose=False)
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path, weights_only=True)
    except BaseException as err:  # preempted: last.ckpt holds the last step, exit 143
        if not trainer.received_sigterm:
            raise
        raise SIGTERMException(PREEMPTED_EXIT_CODE) from err
    if module.export(out_dir) is not None:  # every rank gathers; rank 0 writes
        print(f"world model -> {out_dir}")
    return trainer, module


@hydra.main(config_path="../conf", config_name="finetune_world_model", version_base="1.3")
def main(cfg: DictConfig) -> None:
    exit_on_config_error(run, cfg)


if __name__ == "__main__":
    main()
