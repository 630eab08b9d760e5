"""The rollout policy, OpenVLA-OFT. Nothing is imported here; the parts:

``openvla_oft.py``       the model (``OpenVLAOFTPolicy``) and ``build_policy``, the Hydra
                         ``_target_`` of ``conf/policy/*.yaml``.
``configs.py``           its configs: ``tiny_config``, ``openvla_7b_config``, the wmrl settings.
``checkpoint.py``        the published checkpoint layout on disk, read and written, and the
                         test for a checkpoint directory (``is_policy_dir``).
``vit.py``               the DINOv2 / SigLIP vision transformers.
``text_tokenizer.py``    the prompt and its tokenizer.
``action_tokenizer.py``  action bins <-> token ids, log-probs, un-normalisation.
"""
