"""Device memory for the real sizes, planned on the meta device (``make plan``,
``scripts/plan.py``): no GPU, no weight read. One file per part:

- ``compose.py``: the config planned (``conf/fit.yaml`` with the real-size defaults under the
  user's overrides) and the report's options (``+plan.<name>=...``; the same reader takes the
  full-size check's ``+check.<name>``, ``wmrl/full_size_check/``).
- ``meta.py``: the policy, world model and reward built on ``torch.device("meta")``; parameter
  counts and bytes.
- ``activations.py``: the working sets: the policy's activation formulas (trainer and rollout)
  and the world model's and reward's forwards traced on meta (``strategies/live_bytes.py``).
- ``memory.py``: the plan itself: bytes per role (resident + working set) and per placement,
  and which device sizes each placement fits (``make_plan``).
- ``finetune.py``: the world-model fine-tune (``scripts/finetune_world_model.py``) per rank,
  full and LoRA, its training step traced on meta (``make_finetune_plan``).
- ``report.py``: the plans as tables and as one JSON line per figure.
"""
