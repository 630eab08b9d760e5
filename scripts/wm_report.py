"""A world model's fidelity over whole episodes: the recorded actions replayed open loop from
each episode's first frame, the imagined frames against the recorded ones chunk by chunk.

    python scripts/wm_report.py wmrl/assets/world_model data/held_out --out runs/wm_report
    python scripts/wm_report.py WORLD_MODEL EPISODES --reward wmrl/assets/reward --max-episodes 32
    python scripts/wm_report.py WORLD_MODEL EPISODES --device cuda --num-inference-steps 10

EPISODES is a trajectory dataset (scripts/collect.py) or a LeRobot dataset. Per chunk: PSNR and
SSIM beside the copy-first-frame and copy-last-true-frame baselines, each block's centre error
(against the recorded frame's, and against its privileged state projected through the camera
of a trajectory dataset), how often it vanished (before / after the recorded success) and how
often the two blocks merged; with --reward, the reward's verdicts on imagined vs recorded frames.
Writes OUT/report.json and OUT/report.png; the definitions: wmrl/eval/wm_fidelity.py.
"""

from __future__ import annotations

import argparse

from wmrl.errors import exit_on_config_error
from wmrl.eval.wm_fidelity import run_report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("world_model", help="a world-model folder (save_pretrained's layout)")
    p.add_argument("episodes", help="a trajectory dataset or a LeRobot dataset folder")
    p.add_argument("--reward", default=None, help="a scripts/train_reward.py checkpoint dir")
    p.add_argument("--out", default="runs/wm_report", help="the report's folder")
    p.add_argument("--max-episodes", type=int, default=None, help="the first N episodes only")
    p.add_argument("--seed", type=int, default=0,
                   help="the replay's noise seed (the batch from episode i on: seed + i)")
    p.add_argument("--num-inference-steps", "--steps", dest="steps", type=int, default=5,
                   help="denoising steps per chunk (conf/env/wan_tabletop.yaml's 5)")
    p.add_argument("--device", default="cpu",
                   help="where the world model and the reward run: cpu, cuda, cuda:1 ...")
    p.add_argument("--success-threshold", type=float, default=0.99,
                   help="p(success) at which an episode succeeds (conf/env/wan_tabletop.yaml's)")
    p.add_argument("--context-noise", type=float, default=0.0,
                   help="noise on the condition latents at every chunk (env.context_noise_sigma)")
    p.add_argument("--force", action="store_true", help="replace --out whatever it holds")
    a = p.parse_args(argv)
    exit_on_config_error(run_report, a.world_model, a.episodes, a.out, a.reward, a.max_episodes,
                         a.seed, a.steps, a.success_threshold, a.force, a.device,
                         context_noise_sigma=a.context_noise)


if __name__ == "__main__":
    main()
