"""Honest evaluation of a policy in the simulator, and of runs from what they wrote. Parts, one
file each:

* ``evaluate.py``: success on fixed initial states with Wilson intervals (``scripts/eval.py``,
  the sim-eval callback);
* ``results.py``: an eval's figures, per-task table, GIFs and ``results.json``
  (``scripts/eval.py``);
* ``policy_checkpoint.py``: a policy from its config with a fit checkpoint's weights over it;
* ``held_out.py``: runs scored on the held-out scenes (``scripts/score_held_out.py``);
* ``run_length.py``: every step checkpoint scored there, the best step
  (``scripts/choose_run_length.py``);
* ``seed_report.py``: learning figures over training seeds, paired by seed against a baseline
  arm (``scripts/seed_report.py``);
* ``compare_runs.py``: one logged metric of two runs step by step, a readable line and a PNG
  (``scripts/compare_runs.py``);
* ``success_threshold.py``: the world model's success threshold read closed loop against the
  simulator (``scripts/calibrate_threshold.py``);
* ``side_by_side.py``: the policy in the world model beside the policy in the simulator;
* ``wm_fidelity.py``: a world model's fidelity over whole recorded episodes replayed open loop
  (PSNR / SSIM against baselines, block positions against the recorded frames and the
  privileged state, vanished and merged blocks, the reward's verdicts per chunk;
  ``scripts/wm_report.py``).
"""
