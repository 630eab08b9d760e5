"""The full-size check (``make full-size-check``, ``scripts/full_size_check.py``): each part
of a fit run once, alone, at the real sizes, its peak memory beside ``make plan``'s
(``wmrl.plan``) for the same config on one device. Nothing is imported here; the parts:

``options.py``     the config composed (the plan's, WoVR unless the user names another
                   experiment) and the ``+check.<name>`` options; what each part overrides.
``check.py``       the parent (``run_check``): disk check, what is generated, one child process
                   per part, the JSON lines and the comparison with the plan.
``parts.py``       the children (``python -m wmrl.full_size_check.parts <part> <spec.json>``):
                   ``release``, ``import``, ``policy_checkpoint``, ``world_model``, ``rollout``,
                   ``grpo_lora``, ``grpo_full``.
``cpu_linear.py``  bf16 linear layers on a CPU through float32 GEMMs with bf16 rounding, so a
                   7B bf16 update finishes on a CPU (``scripts/bench.py cpu_bf16`` measures why).
"""
