"""Step checkpoints that survive preemption: the newest ``keep_last`` plus ``last.ckpt``, and
on SIGTERM ``last.ckpt`` after the step in progress, with the command that resumes the run."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import threading

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM: what a shell reports for a job that SIGTERM stopped
HYDRA_PLAIN = re.compile(r"[\w\-+./:%@~]*")  # override values Hydra reads without quotes


class StepCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` with top-k ranked by ``step`` (mode max): its top-k is
    then "the newest k", and it writes the new file before deleting the one that fell out,
    so a good checkpoint is on disk at every instant (each write is atomic:
    ``AtomicCheckpointIO``). ``keep_last``: step files kept beside ``last.ckpt`` (0: only
    ``last.ckpt``; -1: all). ``last.ckpt`` always ends as the run's last step, also when
    ``every_n_steps`` does not divide it.

    Preemption: Lightning's SIGTERM handler only sets ``trainer.received_sigterm``; the loop
    finishes the step in progress and raises ``SIGTERMException`` after it, which reaches
    ``on_exception`` with a whole training state: ``last.ckpt`` is written then unless this
    step's is on disk already. Any other exception after a SIGTERM (e.g. the signal reached
    the Ray actors too) broke that step off: it is dropped, ``last.ckpt`` stays the step
    before. Either way rank 0 prints the resume command (``resume_command``);
    the one trainer set-up (``wmrl.launch.trainer.stop_on_sigterm``) then ends the process
    with ``PREEMPTED_EXIT_CODE``.

    ``ray.init`` (in the datamodule's setup) installs a SIGTERM handler that raises
    ``SystemExit`` at once; Lightning, installing its own after the setup hooks, would chain
    it and abort the step. ``setup`` takes it off for the fit, ``teardown`` puts it back
    (after an exception it stays off: the process is on its way out)."""

    def __init__(self, run_dir: str, keep_last: int = 3, every_n_steps: int = 1,
                 script: str = "scripts/fit.py") -> None:
        super().__init__(dirpath=os.path.join(os.path.abspath(run_dir), "checkpoints"),
                         filename="step-{step:06d}", auto_insert_metric_name=False,
                         monitor="step", mode="max", save_top_k=keep_last, save_last=True,
                         every_n_train_steps=every_n_steps)
        self.run_dir = os.path.abspath(run_dir)
        self.every_n_steps = every_n_steps
        self.script = script  # what the printed resume command runs
        self.saved_step: int | None = None  # the step of the newest checkpoint written
        self._outer_sigterm = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if threading.current_thread() is threading.main_thread():
            self._outer_sigterm = signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._outer_sigterm is not None:  # after Lightning restored its SIG_DFL
            signal.signal(signal.SIGTERM, self._outer_sigterm)
            self._outer_sigterm = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        self.saved_step = trainer.global_step  # this step is on disk (every save is atomic)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning saves every N steps only: a run whose last step is not a multiple of N
        # would otherwise end with the last.ckpt of an earlier step
        if self.saved_step != trainer.global_step:
            self.save_last_now(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule,
                     exception: BaseException) -> None:
        if not trainer.received_sigterm:
            return  # a crash: the step may be half done, keep the checkpoints as they are
        finished = isinstance(exception, SIGTERMException)  # raised between steps
        if finished and self.saved_step != trainer.global_step:
            self.save_last_now(trainer)
        if not trainer.is_global_zero:
            return
        last = self.last_model_path if os.path.isfile(self.last_model_path or "") else None
        if finished:
            what = f"preempted at step {trainer.global_step}: saved {last}"
        else:
            what = f"preempted during a step ({type(exception).__name__}: dropped it)"
            what += f"; the last checkpoint is {last}" if last else "; no checkpoint yet"
        print(f"{what}; resume with: {resume_command(last, self.run_dir, self.script)}", file=sys.stderr,
              flush=True)

    def save_last_now(self, trainer: L.Trainer) -> None:
        """``last.ckpt`` of the step the trainer is at (every rank calls it, as a save)."""
        self.last_model_path = os.path.join(self.dirpath, "last.ckpt")
        # the whole training state (said, or Lightning logs that it defaulted to it)
        trainer.save_checkpoint(self.last_model_path, weights_only=False)


def resume_command(ckpt_path: str | None, run_dir: str, script: str = "scripts/fit.py") -> str:
    """``python <script> <this run's command-line overrides> ckpt_path=... hydra.run.dir=
    <run_dir>``: the same config, into the same run dir (checkpoints and logger runs
    continue). Outside a Hydra app there are no overrides to repeat."""
    given = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    keep = [o for o in given if o.split("=", 1)[0].lstrip("+~") not in ("ckpt_path",
                                                                        "hydra.run.dir")]
    if ckpt_path:
        keep.append(f"ckpt_path={_hydra_value(ckpt_path)}")
    keep.append(f"hydra.run.dir={_hydra_value(run_dir)}")
    return " ".join(["python", script, *(shlex.quote(o) for o in keep)])


def _hydra_value(value: str) -> str:
    if HYDRA_PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
