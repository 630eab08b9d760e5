"""PACE: the world model follows the policy during a fit (``GRPOModule`` runs a round every
``pace.every_n_steps`` steps; ``conf/pace``). Parts: ``pace.py``, the round (collect real
episodes, fine-tune the world model and optionally the reward, push the weights to the env
actors)."""
