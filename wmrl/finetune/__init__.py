"""Fitting the world model and the reward to simulator episodes: used offline (the asset
scripts) and during a fit (PACE, ``wmrl.pace``). Parts, one file each:

* ``world_model.py``: clips from episodes, the flow-matching fine-tune of the action-conditioned
  Wan, replay checks (imagined vs real success);
* ``reward_data.py``: labelled reward frames (simulator frames and the world model's replays);
* ``reward_on_imagination.py``: the reward classifier fine-tuned on imagined frames;
* ``reward_evaluation.py``: a reward judged against ground-truth labels (the one confusion count);
* ``threshold_calibration.py``: the success threshold whose imagined rate matches the simulator's;
* ``image_metrics.py``: PSNR / SSIM of imagined frames.
"""
