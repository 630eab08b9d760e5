"""What a fit prints in its first minute: each Lightning log line once, no warning about the
frozen reference policy on every run."""

import subprocess
import sys

from conftest import ROOT

LOG_ONCE = """
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='root: %(message)s')
from lightning.pytorch.utilities import rank_zero_info
from wmrl.launch.trainer import log_lines_once
rank_zero_info('before')
log_lines_once()
rank_zero_info('after')
"""


def test_each_lightning_line_prints_once_where_the_app_configured_logging():
    out = subprocess.run([sys.executable, "-c", LOG_ONCE], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    text = out.stdout + out.stderr
    # Lightning's own console handler and the root's both printed it; then the root's alone
    assert text.count("before") == 2 and "INFO: before" in out.stderr
    assert text.count("after") == 1 and "root: after" in out.stdout


def test_the_training_bar_counts_steps(capsys, tmp_path):
    import itertools

    import lightning as L
    import torch

    from callbacks.progress import StepProgressBar

    class Steps(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, batch_idx):
            return (self.w - 1).pow(2).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return itertools.count()  # endless, as the rollout DataModule's

    trainer = L.Trainer(max_steps=3, callbacks=[StepProgressBar()], logger=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        accelerator="cpu", default_root_dir=tmp_path)
    trainer.fit(Steps())
    shown = capsys.readouterr().out.split("\r")[-1]  # what the terminal keeps
    assert shown.startswith("step: 100%") and "| 3/3 [" in shown
