"""wmrl: GRPO post-training of VLA robot policies inside a learned video world model.

Where each part lives (every package's docstring names the file of each of its parts). At the
root, what shows the architecture:

* the step: ``module.py`` (``GRPOModule.training_step``: rollout -> score -> update -> sync);
  the trainer assembled from config: ``fit.py``; the contracts every part meets:
  ``interfaces.py``
* config checks: ``schema.py`` (types, choices, ranges), ``config.py`` (across keys, paths)
  and ``asset_checks.py`` (damaged model files, absent devices); building from config:
  ``build.py``; the error a bad setting raises and how a script reports it: ``errors.py``

The runtime, one package per part:

* the update: ``algorithms/`` (advantage estimators: ``algorithms/advantages.py``; stages:
  ``algorithms/update.py``; the GRPO math: ``algorithms/grpo.py``)
* the policy: ``policies/`` (its sampler: ``OpenVLAOFTPolicy.sample`` in
  ``policies/openvla_oft.py``)
* the world model: ``world_model/`` (its diffusion sampler: ``world_model/sampler.py``)
* the envs that imagine and score: ``envs/`` (``envs/wan_env.py``); the rewards and the
  reward shaping: ``rewards/`` (``rewards/shaping.py``); the simulators: ``sim/``
* rollouts on Ray and weight sync: ``rollout/``
* the one trainer set-up of every Lightning entry point (fit, world-model fine-tune, reward
  training): ``launch/``; the world model following the policy: ``pace/``; the world-model
  and reward trainers: ``finetune/``; evaluation in the simulator: ``eval/``
* what every part shares: files written whole, videos, pixels: ``io/``; model weights (the
  dtype table, sharded safetensors, random weights, LoRA): ``weights/``; measuring runs
  (traces, peak memory, statistics, run logs): ``measure/``

Beside it:

* the real-size memory plan: ``plan/``, measured part by part at full size:
  ``full_size_check/``; figures per capability (``scripts/bench.py``): ``bench/``
* LeRobot datasets read and written: ``lerobot/``; the offline importers (RLinf's release,
  reset states from LeRobot), SFT and export: ``pipeline/``
* the shipped checkpoints (tiny policy, 64x64 world model, rewards, initial states):
  ``assets/``, data only
"""

__version__ = "0.1.0"
