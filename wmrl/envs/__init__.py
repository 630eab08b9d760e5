"""Rollout envs behind one chunk contract (``wmrl.interfaces.ChunkEnv``): ``reset(seed,
state_ids)`` -> obs {"image": uint8 [B, H, W, 3], "task"}; ``chunk_step(actions [B, C, 7])`` ->
(obs, rewards [B, C], terminations [B, C], truncations [B, C], info).

- ``wan_env.py``: ``WanWorldModelEnv``, the world-model env: imagines each chunk with the
  action-conditioned Wan model, scores it with a reward model (``wmrl.rewards``); its reward
  shaping (rewards and success from the scores) is ``wmrl/rewards/shaping.py``.
- ``initial_states.py``: reset states (first frames, tasks, optional KIR context), their
  on-disk format, and the seeded per-group draw of state ids every env shares.
- ``sim_env.py``: ``TabletopSimEnv``, the MuJoCo tabletop simulator behind the same contract
  (the oracle: privileged success as the reward).
- ``libero_sim_env.py``: ``LiberoSimEnv``, LIBERO itself behind the contract.
- ``train_pool.py``: a pool of training scenes apart from every evaluation set.

Nothing is imported here: a world-model actor does not load the simulators, nor the reverse.
"""
