"""The policy in the world model beside the simulator, as a figure.

    python scripts/imagined_vs_real.py --out docs/tabletop_imagined_vs_real.png
    python scripts/imagined_vs_real.py --ckpt RUN/checkpoints/last.ckpt --out FIG.png [fit overrides]
    python scripts/imagined_vs_real.py --scenes 64 [fit overrides]       # the figures alone

The fit config's policy (or a fit checkpoint's weights), world model and reward run
``--scenes`` scenes of the sim eval's set in the simulator and in the world model from the
same first frame (``wmrl.eval.side_by_side``, what ``SimEvalCallback`` saves as GIFs at
every eval). The PNG has two rows per scene, real above imagined, one frame per chunk, each
row labelled with its verdict; with ``--gif``, ``FIG.gif`` beside it holds the videos
(imagined | real, the scenes stacked). It prints a JSON row per scene and then the paired
figures (``paired_gap``), the imagined actions replayed in the simulator included
(``replay_in_simulator``): with ``--scenes 64`` and ``--seed`` the fit's seed, the scenes and
episodes of a fit's step-0 ``sim/paired_*``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from wmrl.build import to_container
from wmrl.config import ConfigError, compose_config
from wmrl.eval.policy_checkpoint import load_policy
from wmrl.eval.side_by_side import imagined_vs_real, paired_gap, replay_in_simulator
from wmrl.io.atomic import atomic_path
from wmrl.io.videos import save_gif, side_by_side_video


def figure(results, chunk: int, path: str, title: str) -> None:
    """Rows real / imagined per scene, a frame at the end of every chunk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(max(len(r.real), len(r.imagined)) - 1 for r in results) // chunk + 1
    fig, axes = plt.subplots(2 * len(results), cols, figsize=(1.1 * cols, 2.3 * len(results)),
                             squeeze=False)
    for i, r in enumerate(results):
        for row, (frames, name, ok) in enumerate(((r.real, "real", r.real_success),
                                                  (r.imagined, "imagined",
                                                   r.imagined_success))):
            for c in range(cols):
                ax = axes[2 * i + row, c]
                ax.axis("off")
                t = min(c * chunk, len(frames) - 1)
                ax.imshow(frames[t])
                if i == 0 and row == 0:
                    ax.set_title(f"t={c * chunk}", fontsize=7)
            axes[2 * i + row, 0].text(-4, 32, f"scene {r.scene}\n{name}\n"
                                      f"{'success' if ok else 'fail'}", fontsize=6,
                                      ha="right", va="center")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ckpt", default=None, help="a scripts/fit.py checkpoint (file or folder)")
    p.add_argument("--scenes", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="the PNG (none: the figures alone)")
    p.add_argument("--gif", action="store_true", help="also the videos, as FIG.gif")
    args, overrides = p.parse_known_args(argv)
    try:
        cfg = compose_config("fit", ["run_dir=/tmp/wmrl-figure", *overrides])
        policy = load_policy(to_container(cfg.policy), args.ckpt)
        sim = to_container(cfg.callbacks.sim_eval)
        chunk = int(cfg.rollout.chunk)
        steps = int(cfg.rollout.max_episode_steps)
        res = imagined_vs_real(policy, to_container(cfg.env), cfg.task.name, args.scenes, chunk,
                               steps, sim["env"], float(sim["temperature"]), args.seed)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    replay_in_simulator(res, cfg.task.name, {**sim["env"], "max_episode_steps": steps})
    what = f"{'checkpoint ' + args.ckpt if args.ckpt else 'the base policy'}"
    if args.out:
        figure(res, chunk, args.out, f"{cfg.task.name}, {what}: real (above) and imagined "
                                     "(below) from the same first frame")
    if args.gif and args.out:
        videos = [side_by_side_video(r.imagined, r.real) for r in res]
        t = max(len(v) for v in videos)  # scenes stacked; each holds its last frame
        video = np.concatenate([np.concatenate([v, np.repeat(v[-1:], t - len(v), 0)])
                                for v in videos], axis=1)
        save_gif(video, str(Path(args.out).with_suffix(".gif")))
    print(json.dumps([{"scene": r.scene, "imagined_success": r.imagined_success,
                       "peak_score": round(r.peak_score, 4), "sim_success": r.real_success,
                       "replayed_sim_success": r.replayed_success} for r in res]))
    print(json.dumps(paired_gap(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
