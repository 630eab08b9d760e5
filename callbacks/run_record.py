"""What a run was made from: the resolved config, with every checkpoint, in its run dir and in
every logger's run (hparams.yaml of a CSVLogger, the run config of a WandbLogger)."""

from __future__ import annotations

import copy
import os
from typing import Any

import lightning as L
from omegaconf import OmegaConf

from wmrl.config import CONFIG_KEY
from wmrl.io.atomic import write_text

CONFIG_FILE = "config.yaml"
HEADER = ("# The resolved config of this run (callbacks/run_record.py). Repeat it with\n"
          "#   python scripts/fit.py --config-dir <this dir> --config-name config "
          "run_dir=<new dir> hydra.run.dir=<new dir>\n")


class RunRecordCallback(L.Callback):
    """``checkpoint[CONFIG_KEY]`` = ``config`` in every checkpoint (``scripts/eval.py``
    checks its policy against it; plain dicts, so ``torch.load(weights_only=True)`` reads it),
    and ``<run_dir>/config.yaml`` at fit start, so the run can be repeated from its dir. At fit
    start the config also goes to every logger (``log_hyperparams``: a CSVLogger's
    ``hparams.yaml``, a WandbLogger's run config, nested as in the yaml)."""

    def __init__(self, config: dict[str, Any], run_dir: str) -> None:
        self.config = config
        self.run_dir = run_dir

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and trainer.is_global_zero:
            text = HEADER + OmegaConf.to_yaml(OmegaConf.create(self.config))
            write_text(os.path.join(self.run_dir, CONFIG_FILE), text)
            for lg in trainer.loggers:  # CSVLogger: hparams.yaml; WandbLogger: its run config
                lg.log_hyperparams(copy.deepcopy(self.config))

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = copy.deepcopy(self.config)
