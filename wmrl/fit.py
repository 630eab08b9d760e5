"""Assemble the trainer from a composed Hydra config and run it (``scripts/fit.py``)."""

from __future__ import annotations

import lightning as L
from hydra.utils import get_class
from omegaconf import DictConfig

from callbacks.run_record import RunRecordCallback
from wmrl.algorithms.config import AlgorithmConfig
from wmrl.build import build, to_container
from wmrl.config import check_paths, check_policy_chunk, resolve_ckpt_path, validate
from wmrl.envs.train_pool import start_from_pool
from wmrl.launch import trainer as launch
from wmrl.module import GRPOModule
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.schema import with_defaults


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


def build_trainer(cfg: DictConfig, extra_callbacks: list | None = None) -> L.Trainer:
    """The one trainer set-up (``wmrl.launch.trainer``) with the fit's callbacks: the run
    record first (the resolved config: it needs the whole of it), then conf/callbacks (the
    step checkpoint among them: ``callbacks.checkpoint``), then ``extra_callbacks``."""
    callbacks = [RunRecordCallback(to_container(cfg), cfg.run_dir)]
    callbacks += [build(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += list(extra_callbacks or [])
    return launch.build_trainer(cfg, callbacks, step_checkpoint=False)


def fit(cfg: DictConfig, extra_callbacks: list | None = None) -> tuple[L.Trainer, GRPOModule]:
    """Train; on SIGTERM (preemption) ``last.ckpt`` holds the last finished step, the resume
    command is printed (``callbacks.preemption.StepCheckpoint``), the rollout actors stop and
    ``SIGTERMException`` (a ``SystemExit``) with code ``PREEMPTED_EXIT_CODE`` = 143 ends the
    process: non-zero, so nothing chained after the fit takes the run for finished."""
    validate(resolve_ckpt_path(cfg))  # before Ray or any model starts
    check_paths(cfg)
    cfg = with_defaults(cfg)  # what a group leaves out: its schema's default (wmrl/schema.py)
    cfg = start_from_pool(cfg)  # task.train_pool: GRPO's scenes apart from the sim eval's
    launch.start_run(cfg.seed)
    datamodule = build_datamodule(cfg)  # first: its config checks are cheap, the policy is not
    module = build_module(cfg)
    check_policy_chunk(module.policy, cfg.rollout.chunk)  # not inside an actor, after Ray
    trainer = build_trainer(cfg, extra_callbacks)
    # on SIGTERM the rollout actors stop too (Lightning tears down only the trainer)
    with launch.stop_on_sigterm(trainer, cleanup=datamodule.teardown):
        trainer.fit(module, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    return trainer, module
