"""The action-conditioned Wan video world model. Nothing is imported here (diffusers takes
~10 s to import, which a process that only reads or writes a world-model directory does not
need); the parts:

``action_wan.py``  ``ActionWanModel``: the diffusers Wan DiT + VAE + action modules and the
                   chunk generation.
``objective.py``   the training objective (``FlowMatchObjective``): flow matching on the
                   generated latents, the condition frames held at timestep 0 (the equations).
``sampler.py``     the sampler: the rectified-flow schedule and its Euler steps (the equations).
``vae_objective.py`` the VAE's training loss (the world-model trainer's ``part=vae``).
``files.py``       a world-model directory's layout on disk, and the test for one
                   (``is_world_model_dir``).
``clip_layout.py`` the model's input layout (condition frames, chunk, reset and hold actions,
                   ``build_clip``): the env's and the trainer's clips, one definition.
"""
