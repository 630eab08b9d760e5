"""Action-conditioned Wan video world model (diffusers Wan DiT + VAE + action modules):
``wmrl.world_model.action_wan``. Nothing is imported here: diffusers takes ~10 s to import
(its autoencoders package loads every autoencoder), which a process that only reads or writes
a world-model directory (``wmrl.world_model.files``) does not need."""
