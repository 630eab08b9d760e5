"""Rollouts on Ray: the DataModule, the episode engine, the actors and weight sync."""

from wmrl.rollout.datamodule import RolloutDataModule

__all__ = ["RolloutDataModule"]
