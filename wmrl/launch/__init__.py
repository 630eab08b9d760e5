"""How every Lightning entry point starts, checks and stops a run.

- ``trainer.py``: the one trainer set-up (seed, warnings, log lines, strategy, logger, atomic
  and step checkpoints, SIGTERM -> ``last.ckpt`` + the resume command + exit 143) used by
  ``wmrl.fit`` (scripts/fit.py), scripts/finetune_world_model.py and scripts/train_reward.py.
  Each entry point checks its config by its schema (``wmrl.schema``) before any model loads.
"""
