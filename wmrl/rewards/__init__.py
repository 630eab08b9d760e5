"""Reward models and reward shaping. The contract: ``wmrl.interfaces.RewardModel``, frames uint8
[B, C, H, W, 3] + B task strings -> per-frame success scores float [B, C] in [0, 1].

- ``base.py``: ``LazyRewardModel``, the plumbing every reward model shares (built lazily on the
  Ray worker, device moves, offload, pickled without weights).
- ``resnet.py``: ResNet-18 success classifiers (``ResNetSuccessReward``,
  ``TaskResNetSuccessReward``), the published Wan LIBERO rewards and the trained tabletop one.
- ``topreward.py``: ``TOPReward``, a frozen Qwen3-VL reading success off one token's
  probability.
- ``shaping.py``: reward shaping, scores -> the env's rewards and success (relative or binary
  reward, success threshold, the resample check's shift), with the equations.

Nothing is imported here: an env that uses one reward loads only that one's dependencies.
"""
