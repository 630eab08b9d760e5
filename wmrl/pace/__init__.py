"""PACE: the world model follows the policy during a fit (``GRPOModule`` runs a round every
``pace.every_n_steps`` steps; ``conf/pace``; its settings, one typed object:
``wmrl.schema.PaceConfig``, on the config check's floor). Nothing is imported here; the parts:

``round.py``   ``Pace``, the round: collect real episodes, fine-tune the world model and
               optionally the reward, push the weights to the env actors.
``ledger.py``  ``PaceLedger``: the simulator episodes and steps PACE spent and each round's
               figures (``summary.json``, ``history.jsonl``), checkpointed with the fit.
"""
