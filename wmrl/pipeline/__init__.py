"""The offline asset pipeline: what ``make assets``, ``scripts/eval.py``, ``scripts/plan.py`` and
the training scripts run - simulator datasets, behaviour cloning, world-model and reward
training, replay checks, simulator evaluation, memory planning.

It imports the runtime (``wmrl.policies``, ``wmrl.world_model``, ``wmrl.envs``,
``wmrl.rewards``, ``wmrl.sim``); the runtime never imports it.
"""
