"""The update's math, pure torch (no Lightning, no Ray). Nothing is imported here; the parts:

``grpo.py``         returns and masks, group-normalised advantages, the group filters, the
                    clipped surrogate with its KL penalty and aggregations (the equations).
``advantages.py``   the advantage-estimator registry (``algorithm.adv_estimator``: grpo, rloo):
                    a new estimator is one function and one line there.
``update.py``       one batch's update as named stages: score episodes (advantages, keep-mask),
                    rollout counts, samples, padding across ranks.
``config.py``       ``AlgorithmConfig``: every setting of the update, its defaults and checks.
``lr_schedule.py``  the learning rate over the run (constant, cosine, warm-up).
"""
