"""The world-model fine-tune on a dataset under a Trainer (``scripts/finetune_world_model.py``
is its argument parsing): the config checked, ``WorldModelFinetune`` fitted on
``WorldModelClipData``, the result exported to ``out_dir``."""

from __future__ import annotations

import os
from collections.abc import Callable

from omegaconf import DictConfig

from wmrl.build import to_container  # also registers ${wmrl_assets:}, which the config uses
from wmrl.config import ConfigError, resolve_ckpt_path
from wmrl.finetune.world_model_clips import WorldModelClipData
from wmrl.finetune.world_model_module import WorldModelFinetune
from wmrl.io.atomic import check_output_dir
from wmrl.launch.trainer import build_trainer, start_run, stop_on_sigterm
from wmrl.schema import check_entry
from wmrl.world_model.files import CONFIG_FILES, is_world_model_dir

SCRIPT = "scripts/finetune_world_model.py"  # named in the resume command


def finetune_world_model(cfg: DictConfig, horizon_report: Callable | None = None):
    """Check the inputs (schema, ``out_dir``, ``world_model.path``, the module's settings)
    before any data or model loads, fine-tune, export; returns (trainer, module).
    ``horizon_report``: ``wmrl.eval.wm_fidelity.fidelity_report`` (a floor above this one:
    the script passes it), needed by ``module.horizon_episodes`` > 0."""
    check_entry("finetune_world_model", resolve_ckpt_path(cfg))
    check_output_dir(cfg.out_dir, "world_model", cfg.overwrite, key="out_dir")
    wm_path = cfg.world_model.get("path")
    if wm_path and not is_world_model_dir(wm_path):
        raise ConfigError(f"world_model.path={wm_path!r} is not a world-model directory (it "
                          f"needs {', '.join(CONFIG_FILES)}): give one that "
                          "scripts/import_rlinf.py or scripts/train_world_model.py wrote")
    out_dir = os.path.abspath(str(cfg.out_dir))
    start_run(cfg.seed)
    module = WorldModelFinetune(world_model=to_container(cfg.world_model),  # loads nothing yet
                                objective=to_container(cfg.objective),
                                lora=to_container(cfg.lora) if cfg.lora else None,
                                video_dir=os.path.join(cfg.run_dir, "videos"),
                                horizon_report=horizon_report, seed=cfg.seed,
                                **to_container(cfg.module))
    data = WorldModelClipData(**to_container(cfg.data), seed=cfg.seed)  # reads the metadata
    trainer = build_trainer(cfg, script=SCRIPT)
    with stop_on_sigterm(trainer):  # last.ckpt of the last step, the resume command, exit 143
        if cfg.validate_first and cfg.ckpt_path is None:  # the starting model's held-out figures
            trainer.validate(module, datamodule=data, verbose=False)
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path, weights_only=True)
    if module.export(out_dir) is not None:  # every rank gathers; rank 0 writes
        print(f"world model -> {out_dir}")
    return trainer, module
