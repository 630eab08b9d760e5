"""The one trainer set-up of every Lightning entry point (``wmrl.fit``,
scripts/finetune_world_model.py, scripts/train_reward.py)::

    start_run(cfg.seed)                    # log lines once, known warnings off, seed
    trainer = build_trainer(cfg, callbacks, script="scripts/<entry>.py")
    with stop_on_sigterm(trainer):         # SIGTERM: last.ckpt, resume command, exit 143
        trainer.fit(module, datamodule=data, ckpt_path=cfg.ckpt_path, weights_only=True)

``cfg`` (a DictConfig or dict) holds ``run_dir``, ``strategy`` (a ``_target_`` spec or ``{strategy: <Lightning's
name>}``), ``logger`` (a spec or false), ``trainer`` (``L.Trainer``'s arguments) and
``checkpoint`` (``every_n_steps``, ``keep_last``: ``callbacks.preemption.StepCheckpoint``);
every checkpoint is written atomically (``callbacks.checkpoint_io.AtomicCheckpointIO``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import lightning as L
from lightning.pytorch.utilities.exceptions import SIGTERMException

from callbacks.checkpoint_io import AtomicCheckpointIO
from callbacks.preemption import PREEMPTED_EXIT_CODE, StepCheckpoint
from callbacks.progress import StepProgressBar
from callbacks.resumable_loggers import run_id
from wmrl.build import build, to_container


def quiet_known_warnings() -> None:
    """Lightning's warnings that every wmrl run would print, each for a reason of ours (set
    when the run starts: a filter set at import would not outlive pytest's collection)."""
    # checkpoints after the update are what we want (the weights the next rollout uses)
    warnings.filterwarnings("ignore", message=".*no pre-optimization state was saved.*")
    # frozen parts (the reference policy, the world model's VAE, a reward's BatchNorm) are in
    # eval mode on purpose
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start")
    # the batches are drawn in the main process on purpose (one generator, in order)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def log_lines_once() -> None:
    """Lightning's package logger prints with its own console handler and also passes each
    record up to the root logger: under Hydra (root handlers: the console and
    ``<run_dir>/<script>.log``) every INFO line printed twice. Where the root logger has
    handlers, they alone print (as ``lightning.pytorch`` itself decides at import)."""
    lightning_logger = logging.getLogger("lightning")
    if logging.getLogger().hasHandlers():
        for handler in [h for h in lightning_logger.handlers if type(h) is logging.StreamHandler]:
            lightning_logger.removeHandler(handler)


def start_run(seed: int) -> None:
    """What every entry point does once its config is checked: Lightning's lines printed
    once, the known warnings off, every RNG seeded with ``seed``."""
    log_lines_once()
    quiet_known_warnings()
    L.seed_everything(seed, workers=True, verbose=False)


def build_strategy(spec):
    """A strategy config is a ``_target_`` spec or Lightning's name for one
    (``{strategy: auto}``)."""
    return build(spec) if "_target_" in spec else spec["strategy"]


def build_logger(cfg):
    """``cfg.logger`` (false/absent: none); ``id: null`` (wandb) = the run dir's own id, so a
    resume into the same run dir continues the same logger run."""
    if not cfg.get("logger"):
        return False
    spec = dict(to_container(cfg["logger"]))
    if "id" in spec and spec["id"] is None:
        spec["id"] = run_id(cfg["run_dir"])
    return build(spec)


def build_trainer(cfg, callbacks: Sequence[L.Callback] = (), script: str = "scripts/fit.py",
                  step_checkpoint: bool = True) -> L.Trainer:
    """An ``L.Trainer`` of ``cfg`` (module docstring) with ``callbacks``, then the step
    checkpoint of ``cfg.checkpoint`` whose resume command runs ``script``
    (``step_checkpoint=False``: the caller's callbacks hold it: the fit's conf/callbacks),
    then the "step 12/30" progress bar where ``trainer.enable_progress_bar``."""
    callbacks = list(callbacks)
    if step_checkpoint:
        c = cfg["checkpoint"]
        callbacks.append(StepCheckpoint(cfg["run_dir"], keep_last=c["keep_last"],
                                        every_n_steps=c["every_n_steps"], script=script))
    trainer_kw = {"default_root_dir": cfg["run_dir"], **to_container(cfg["trainer"])}
    if trainer_kw.get("enable_progress_bar", True):
        callbacks.append(StepProgressBar())  # "step 12/30", not Lightning's "Epoch 0/-2"
    return L.Trainer(strategy=build_strategy(to_container(cfg["strategy"])),
                     logger=build_logger(cfg), callbacks=callbacks,
                     plugins=[AtomicCheckpointIO()], **trainer_kw)


@contextmanager
def stop_on_sigterm(trainer: L.Trainer, cleanup: Callable[[], None] | None = None
                    ) -> Iterator[None]:
    """Run the block; after a SIGTERM (preemption) whatever it raised becomes
    ``SIGTERMException`` (a ``SystemExit``) with code ``PREEMPTED_EXIT_CODE`` = 143: non-zero,
    so nothing chained after the run takes it for finished. ``StepCheckpoint`` has written
    ``last.ckpt`` of the last finished step and printed the resume command by then;
    ``cleanup`` runs first (Lightning tears down only the trainer after an exception)."""
    try:
        yield
    except BaseException as err:
        if not trainer.received_sigterm:
            raise
        if cleanup is not None:
            cleanup()
        raise SIGTERMException(PREEMPTED_EXIT_CODE) from err
