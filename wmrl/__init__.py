"""wmrl: GRPO post-training of VLA robot policies inside a learned video world model.

Where each part lives (every package's docstring names the file of each of its parts):

* the step: ``module.py`` (``GRPOModule.training_step``: rollout -> score -> update -> sync);
  the trainer assembled from config: ``fit.py``; the one trainer set-up of every Lightning
  entry point (fit, world-model fine-tune, reward training): ``launch/``
* the update: ``algorithms/`` (advantage estimators: ``advantages.py``; stages: ``update.py``;
  the GRPO math: ``grpo.py``; settings: ``config.py``)
* the policy: ``policies/`` (its sampler: ``OpenVLAOFTPolicy.sample`` in ``openvla_oft.py``)
* the world model: ``world_model/`` (its diffusion sampler: ``sampler.py``)
* the env that imagines and scores: ``envs/wan_env.py``; the rewards and the reward shaping:
  ``rewards/`` (``shaping.py``)
* rollouts on Ray and weight sync: ``rollout/``
* the world model following the policy: ``pace/``; world-model and reward fine-tunes:
  ``finetune/``; evaluation in the simulator: ``eval/``; the simulators: ``sim/``
* the real-size memory plan: ``plan/``, measured part by part at full size:
  ``full_size_check/``; LeRobot datasets read and written: ``lerobot/``; the
  offline importers (RLinf's release, reset states from LeRobot), SFT and export: ``pipeline/``
* config checks: ``schema.py`` (types, choices, ranges) and ``config.py`` (across keys,
  paths); building from config: ``build.py``; the contracts: ``interfaces.py``
"""

__version__ = "0.1.0"
