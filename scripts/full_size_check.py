"""Pre-flight at full size on your own machine (a CPU or one card) before renting GPUs:
``make full-size-check``.

    python scripts/full_size_check.py                        # WoVR at the published sizes
    python scripts/full_size_check.py policy.pretrained_path=/data/openvla-oft-libero \
        env.world_model.path=/data/wovr_imported              # your checkpoints
    python scripts/full_size_check.py +check.release=/data/RLinf-Wan-LIBERO-Spatial
    python scripts/full_size_check.py +check.parts=[world_model,rollout] +check.envs=2

Composes what ``make plan`` plans (``conf/fit.yaml``, ``experiment=wovr_libero_spatial
env=wovr_libero`` unless you name others, then ``conf/experiment/real_size.yaml``, then your
overrides) and runs each part of a fit once, alone, in a child process:

``release``   (no world model at ``env.world_model.path`` and no ``+check.release``) a release
              in RLinf's layout with random weights at the config's shapes
              (``wmrl.pipeline.rlinf.synthetic``);
``import``    that release (or yours) through the import ``scripts/import_rlinf.py`` runs
              (``wmrl.pipeline.rlinf.release``);
``policy_checkpoint`` (no checkpoint at ``policy.pretrained_path``) random weights at the
              published 7B's shapes, bf16, in the published layout;
``world_model`` an env actor (``RolloutActor``: the world model + the reward) resets
              ``+check.envs`` envs and steps one chunk;
``rollout``   a policy actor (``rollout.policy_dtype``) samples one chunk for them;
``grpo_lora`` one GRPO update (2 micro-batches of ``+check.micro_batch`` samples, one AdamW
              step) through ``GRPOModule`` and the trainer set-up every entry point uses
              (``wmrl.launch.trainer``), ``policy/lora=rlinf`` on a bf16 base;
``grpo_full`` the same with every parameter trained, as the config says (the documented
              real-size setting: float32 master weights, bf16-mixed).

On a CPU the parts' bf16 linear layers run through float32 GEMMs with bf16 rounding
(``wmrl.full_size_check.cpu_linear``): torch computes a bf16 matrix product there in its reference GEMM, and one
7B GRPO micro-batch did not finish its backward in 30 minutes on 2 cores. The VAE runs in
float32 there: bf16 3-D convolutions have no fast CPU kernel either.

Prints one JSON line per figure: seconds, and each role's peak memory beside ``make plan``'s
prediction for the same setting (the same config, one device, the measured prompt length):
the allocator's peak on a card, the resident set over the interpreter's on a CPU
(``wmrl.measure.peak_memory``). ``agrees`` is false where they differ by more than ``+check.tolerance``
(15%). A part whose planned peak exceeds this machine's free memory is skipped with the plan's
figure. Exit 1 when a part fails. Generated files go to ``+check.workdir`` (disk space is
checked first) and are removed at the end unless ``+check.keep=true``. The logic is
``wmrl.full_size_check`` (its ``__init__`` names the file of each part).
"""

from __future__ import annotations

import sys

from wmrl.full_size_check.check import run_check

if __name__ == "__main__":
    sys.exit(run_check(sys.argv[1:]))
