"""Rollouts on Ray: the DataModule (``wmrl.rollout.datamodule``), the episode engine, the
actors and weight sync. Nothing is imported here: the actors import the worker modules and need
no Lightning."""
