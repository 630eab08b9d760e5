"""Rollouts on Ray. Nothing is imported here (the actors import the worker modules and need
no Lightning); the parts:

``datamodule.py``   ``RolloutDataModule``: one batch of episodes per training step, the
                    trainer's entry point (start, rollout, weight sync, teardown).
``config.py``       ``RolloutConfig``: the rollout group's settings, their defaults and ranges.
``engine.py``       the episode engine: policy samples and env chunk steps in flight.
``actor_pool.py``   the actors that exist and their restarts; ``workers.py``: the actors.
``placement.py``    which Ray resources and device each actor gets.
``actor_sync.py``   policy and world-model weights to the actors, over ``weight_sync/`` (one
                    module per transport).
``sync_group.py``   the collective group between trainer and actors.
``given.py``        ``GivenRollouts``: batches made beforehand, without Ray (the tests', the
                    full-size check's one GRPO update).
"""
