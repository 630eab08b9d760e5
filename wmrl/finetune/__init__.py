"""Fitting the world model and the reward to simulator episodes: used offline (the asset
scripts) and during a fit (PACE, ``wmrl.pace``). Parts, one file each:

* ``world_model_module.py``: the one world-model trainer (``WorldModelFinetune``: the asset
  build from scratch, the fine-tune on a dataset and PACE's refresh take its step);
* ``world_model_fit.py``: the fine-tune on a dataset under a Trainer
  (scripts/finetune_world_model.py);
* ``world_model_build.py``: the asset built from scratch, the VAE and DiT stages + metrics
  (scripts/train_world_model.py);
* ``world_model.py``: clips from episodes, cached latents, quality and replay checks
  (imagined vs real success) around it;
* ``world_model_clips.py``: the fine-tune's clip stream from LeRobot / trajectory datasets;
* ``own_context.py``: clips whose context is the world model's own imagination (the trainer's
  ``own_context_fraction``);
* ``update.py``: one optimizer update (backward, gradient clip, step, lr schedule), the step
  of every trainer here;
* ``reward_data.py``: labelled reward frames (simulator frames and the world model's replays);
* ``reward_trainer.py``: the one reward trainer (``RewardTrainer``: scripts/train_reward.py
  under a Trainer, PACE and the fit to imagination take its step without one);
* ``reward_datasets.py``: the frames + success labels scripts/train_reward.py reads;
* ``reward_on_imagination.py``: the reward classifier fine-tuned on imagined frames;
* ``reward_evaluation.py``: a reward judged against ground-truth labels (the one confusion count);
* ``threshold_calibration.py``: the success threshold whose imagined rate matches the simulator's;
* ``image_metrics.py``: PSNR / SSIM of imagined frames.
"""
