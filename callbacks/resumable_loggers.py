"""Logger runs that a resume into the same run dir continues (``conf/logger/*.yaml``)."""

from __future__ import annotations

import csv
import os
import secrets
import tempfile

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

RUN_ID_FILE = "wandb_id"


def run_id(run_dir: str) -> str:
    """The id of the run dir's logger run: made at its first start, read back on a resume.

    Made once per dir, not a hash of its path: the same path on another machine (containers
    all have /workspace/outputs/...) is another run. Every rank may call this; ``os.link``
    publishes the complete file only if none is there yet, so all of them read one id."""
    path = os.path.join(run_dir, RUN_ID_FILE)
    if not os.path.exists(path):
        os.makedirs(run_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=f".{RUN_ID_FILE}.")
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(6) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another rank was first
        finally:
            os.remove(tmp)
    with open(path) as f:
        return f.read().strip()


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        # Lightning deletes an existing metrics.csv here; continue it instead, under its
        # header (a new metric key rewrites the file with the union of keys, rows kept)
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])


class AppendingCSVLogger(CSVLogger):
    """``CSVLogger`` that appends to an existing ``metrics.csv``: with a fixed ``version``, a
    resumed run keeps the rows logged before the preemption. Rows of steps after the resumed
    checkpoint (a crash between checkpoints) appear twice; the later one is the run's."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment
