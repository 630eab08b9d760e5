"""Importing RLinf's WoVR release (``scripts/import_rlinf.py``) into the layouts wmrl reads.
Nothing is imported here; one module per artifact:

``release.py``     the whole release (``import_release``: what the script runs): every input
                   checked, then one output folder written whole or not at all.
``dit.py``         the action-conditioned DiT (DiffSynth / original-Wan keys -> diffusers'
                   ``WanTransformer3DModel`` + ``action/``), streamed shard by shard.
``vae.py``         the Wan2.2 VAE ``.pth`` -> diffusers' ``AutoencoderKLWan``.
``reset_data.py``  the reset data (``traj*.npy``) -> wmrl's initial states (with KIR context).
``npy.py``         the restricted unpickler the reset data is read with.
``common.py``      what they share: ``ImportRefused``, the meta-device shape check, progress.
``synthetic.py``   a release in RLinf's layout with random weights at any size (the full-size
                   check's, when no release is at hand).
"""
