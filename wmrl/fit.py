"""Assemble the trainer from a composed Hydra config and run it (``scripts/fit.py``)."""

from __future__ import annotations

import logging
import warnings

import lightning as L
from hydra.utils import get_class
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from callbacks.checkpoint_io import AtomicCheckpointIO
from callbacks.preemption import PREEMPTED_EXIT_CODE
from callbacks.progress import StepProgressBar
from callbacks.resumable_loggers import run_id
from callbacks.run_record import RunRecordCallback
from wmrl.algorithms.config import AlgorithmConfig
from wmrl.build import build, to_container
from wmrl.config import check_paths, check_policy_chunk, resolve_ckpt_path, validate
from wmrl.envs.train_pool import start_from_pool
from wmrl.module import GRPOModule
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.schema import with_defaults


def quiet_known_warnings() -> None:
    """Lightning's warnings that every wmrl fit would print, each for a reason of ours (set
    when the fit starts: a filter set at import would not outlive pytest's collection)."""
    # checkpoints after the update are what we want (the weights the next rollout uses)
    warnings.filterwarnings("ignore", message=".*no pre-optimization state was saved.*")
    # the frozen reference policy is in eval mode on purpose (GRPOModule warns of the trained
    # policy's own)
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start")


def log_lines_once() -> None:
    """Lightning's package logger prints with its own console handler and also passes each
    record up to the root logger: under Hydra (root handlers: the console and
    ``<run_dir>/fit.log``) every INFO line printed twice. Where the root logger has handlers,
    they alone print (as ``lightning.pytorch`` itself decides at import)."""
    lightning_logger = logging.getLogger("lightning")
    if logging.getLogger().hasHandlers():
        for handler in [h for h in lightning_logger.handlers if type(h) is logging.StreamHandler]:
            lightning_logger.removeHandler(handler)


def build_module(cfg: DictConfig) -> GRPOModule:
    """The module ``algorithm._target_`` names (``wmrl.module.GRPOModule``) with the policy,
    the rollout's group and temperature, the algorithm's settings as one
    ``AlgorithmConfig``, and PACE (``pace``, when chosen)."""
    pace = None if cfg.get("pace") is None else to_container(cfg.pace)
    settings = AlgorithmConfig.of(to_container(cfg.algorithm))
    module = get_class(cfg.algorithm._target_)
    return module(policy=to_container(cfg.policy), group_size=cfg.rollout.group_size,
                  temperature=cfg.rollout.temperature, algorithm=settings, seed=cfg.seed,
                  pace=pace)


def build_datamodule(cfg: DictConfig) -> RolloutDataModule:
    """``rollout`` (its ``_target_``: ``RolloutDataModule``) with the policy and the env (the
    env scores its frames with ``reward``)."""
    env = dict(to_container(cfg.env))
    if cfg.get("reward"):
        env["reward"] = to_container(cfg.reward)
    return build(cfg.rollout, _recursive_=False, policy=to_container(cfg.policy), env=env,
                 seed=cfg.seed,
                 tracing=bool(cfg.get("tracing", {}).get("enabled", False)))


def build_logger(cfg: DictConfig):
    """``id: null`` in a logger config (wandb) = the run dir's own id, so a resume into the
    same run dir continues the same logger run."""
    if not cfg.get("logger"):
        return False
    spec = to_container(cfg.logger)
    if "id" in spec and spec["id"] is None:
        spec["id"] = run_id(cfg.run_dir)
    return build(spec)


def build_trainer(cfg: DictConfig, extra_callbacks: list | None = None) -> L.Trainer:
    # the run record first (the resolved config: it needs the whole of it), then conf/callbacks
    callbacks = [RunRecordCallback(to_container(cfg), cfg.run_dir)]
    callbacks += [build(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += list(extra_callbacks or [])
    if cfg.trainer.get("enable_progress_bar", True):
        callbacks.append(StepProgressBar())  # "step 12/30", not Lightning's "Epoch 0/-2"
    logger = build_logger(cfg)
    # a strategy config is a `_target_` spec or Lightning's name for one ({strategy: auto})
    strategy = build(cfg.strategy) if "_target_" in cfg.strategy else cfg.strategy.strategy
    trainer_kw = {"default_root_dir": cfg.run_dir, **to_container(cfg.trainer)}  # sim_eval/ etc.
    return L.Trainer(strategy=strategy, logger=logger, callbacks=callbacks,
                     plugins=[AtomicCheckpointIO()], **trainer_kw)


def fit(cfg: DictConfig, extra_callbacks: list | None = None) -> tuple[L.Trainer, GRPOModule]:
    """Train; on SIGTERM (preemption) ``last.ckpt`` holds the last finished step, the resume
    command is printed (``callbacks.preemption.StepCheckpoint``), the rollout actors stop and
    ``SIGTERMException`` (a ``SystemExit``) with code ``PREEMPTED_EXIT_CODE`` = 143 ends the
    process: non-zero, so nothing chained after the fit takes the run for finished."""
    validate(resolve_ckpt_path(cfg))  # before Ray or any model starts
    log_lines_once()
    quiet_known_warnings()
    check_paths(cfg)
    cfg = with_defaults(cfg)  # what a group leaves out: its schema's default (wmrl/schema.py)
    cfg = start_from_pool(cfg)  # task.train_pool: GRPO's scenes apart from the sim eval's
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build_datamodule(cfg)  # first: its config checks are cheap, the policy is not
    module = build_module(cfg)
    check_policy_chunk(module.policy, cfg.rollout.chunk)  # not inside an actor, after Ray
    trainer = build_trainer(cfg, extra_callbacks)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    except BaseException as err:
        if not trainer.received_sigterm:
            raise
        datamodule.teardown()  # Lightning tears down only the trainer after an exception
        raise SIGTERMException(PREEMPTED_EXIT_CODE) from err
    return trainer, module
