"""The offline pipeline (run by ``scripts/``, never imported by the runtime). Nothing is
imported here; one module per artifact:

``rlinf/``            RLinf's WoVR release imported (DiT, VAE, reset data).
``lerobot_reset.py``  reset states from a LeRobot dataset (``scripts/import_lerobot.py``).
``lerobot_export.py`` our demonstrations as a LeRobot dataset (``scripts/export_lerobot.py``).
``task_from_lerobot.py`` your own task from a LeRobot dataset: the three stages in one command
                      (``scripts/task_from_lerobot.py``).
``sft.py``            behaviour cloning of the base policy.
``sft_policy.py``     the SFT run: train, save, check in the sim (``scripts/sft_policy.py``).
``export.py``         a fit's result out of wmrl (the policy, PACE's world model).
``assets.py``         the shipped tiny checkpoints rebuilt, stage by stage (``make assets``).

It imports the runtime; the runtime never imports it. Only what measures it sits above it
(``wmrl/full_size_check/`` runs the RLinf import at full size, ``wmrl/bench/rlinf_import.py``
its peak memory; tests/test_layout.py holds the floors).
"""
