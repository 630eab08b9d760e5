"""Assemble the trainer from a composed Hydra config and run it (``scripts/fit.py``)."""

from __future__ import annotations

import os
import warnings

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig

from callbacks.checkpoint_io import AtomicCheckpointIO
from callbacks.step_summary import StepSummaryCallback
from callbacks.tracing import TracingCallback
from callbacks.weight_sync import WeightSyncCallback
from wmrl.config import build, to_container, validate
from wmrl.module import GRPOModule
from wmrl.rollout.datamodule import RolloutDataModule

# GRPOModule pulls its batch itself (``dataloader_iter``) so rollouts never run ahead of the
# weights; Lightning flags that step flavour as experimental on every run.
warnings.filterwarnings("ignore", message=".*dataloader_iter.*")
# checkpoints after the update are what we want (the weights the next rollout uses)
warnings.filterwarnings("ignore", message=".*no pre-optimization state was saved.*")


def build_module(cfg: DictConfig) -> GRPOModule:
    return GRPOModule(policy=to_container(cfg.policy), group_size=cfg.rollout.group_size,
                      temperature=cfg.rollout.temperature, seed=cfg.seed,
                      **to_container(cfg.algorithm))


def build_datamodule(cfg: DictConfig) -> RolloutDataModule:
    env = dict(to_container(cfg.env))
    if cfg.get("reward"):
        env["reward"] = to_container(cfg.reward)
    return RolloutDataModule(policy=to_container(cfg.policy), env=env, seed=cfg.seed,
                             tracing=bool(cfg.get("tracing", {}).get("enabled", False)),
                             **to_container(cfg.rollout))


def build_trainer(cfg: DictConfig, extra_callbacks: list | None = None) -> L.Trainer:
    ckpt_dir = os.path.join(cfg.run_dir, "checkpoints")
    callbacks = [
        WeightSyncCallback(),
        StepSummaryCallback(),
        ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=cfg.checkpoint.every_n_steps,
                        save_last=True, save_top_k=cfg.checkpoint.save_top_k),
    ]
    if cfg.get("tracing", {}).get("enabled", False):
        callbacks.append(TracingCallback(os.path.join(cfg.run_dir, "trace")))
    callbacks += [build(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += list(extra_callbacks or [])
    logger = build(cfg.logger) if cfg.get("logger") else False
    # a strategy config is a `_target_` spec or Lightning's name for one ({strategy: auto})
    strategy = build(cfg.strategy) if "_target_" in cfg.strategy else cfg.strategy.strategy
    trainer_kw = {"default_root_dir": cfg.run_dir, **to_container(cfg.trainer)}  # sim_eval/ etc.
    return L.Trainer(strategy=strategy, logger=logger, callbacks=callbacks,
                     plugins=[AtomicCheckpointIO()], **trainer_kw)


def fit(cfg: DictConfig, extra_callbacks: list | None = None) -> tuple[L.Trainer, GRPOModule]:
    validate(cfg)  # before Ray or any model starts
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build_datamodule(cfg)  # first: its config checks are cheap, the policy is not
    module = build_module(cfg)
    trainer = build_trainer(cfg, extra_callbacks)
    trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path,
                weights_only=True)
    return trainer, module
