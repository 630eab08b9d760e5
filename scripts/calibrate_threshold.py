"""The world model's success threshold, read closed loop against the simulator.

    python scripts/calibrate_threshold.py                         # base policy, eval_seed 2
    python scripts/calibrate_threshold.py --ckpt RUN/checkpoints/last.ckpt   # a trained policy
    python scripts/calibrate_threshold.py --out FILE.json [fit overrides, e.g. env.num_inference_steps=5]

The policy (the fit config's ``policy``, or a fit checkpoint's weights) runs closed loop in the
fit config's world-model env (``env``, ``reward``) from ``--states`` scenes of ``--eval-seed``
(default 2: neither the training scenes, ``task.eval_seed`` 0, nor the unseen ones,
``task.unseen_eval_seed`` 1), and in the simulator on the same scenes. Prints, and writes to
``--out``, one JSON object: the simulator's success, the world model's success at each
threshold (``wmrl.finetune.threshold_calibration``) and the threshold whose imagined success is
closest to the simulator's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from wmrl.atomic import write_text  # noqa: E402
from wmrl.build import build, to_container  # noqa: E402
from wmrl.config import ConfigError, check_held_out_seed, compose_config  # noqa: E402
from wmrl.envs.initial_states import write_initial_states  # noqa: E402
from wmrl.eval.evaluate import evaluate_policy  # noqa: E402
from wmrl.eval.policy_checkpoint import load_policy  # noqa: E402
from wmrl.finetune.reward_evaluation import ranking_metrics  # noqa: E402
from wmrl.finetune.threshold_calibration import (  # noqa: E402
    imagined_peaks,
    rate_matching_threshold,
    success_by_threshold,
)
from wmrl.sim.tabletop import initial_frames  # noqa: E402


def calibrate(overrides: list[str], eval_seed: int = 2, states: int = 256, num_envs: int = 64,
              ckpt: str | None = None, seed: int = 0) -> dict:
    cfg = compose_config("fit", overrides)
    task = cfg.task
    check_held_out_seed(task, eval_seed, "calibrate")
    temperature = float(cfg.callbacks.sim_eval.temperature)
    policy = load_policy(to_container(cfg.policy), ckpt)
    size = tuple(task.image_size)
    frames, texts = initial_frames(task.name, states, seed=eval_seed, image_size=size,
                                   camera=task.camera)
    env_cfg = dict(to_container(cfg.env), reward=to_container(cfg.reward))
    env_cfg.update(num_envs=min(num_envs, states), group_size=1, chunk=int(cfg.rollout.chunk),
                   max_episode_steps=int(task.max_episode_steps), resample_check=False,
                   resample_return=None)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scenes:  # the env loads its initial states from a dir
        write_initial_states(scenes, frames, texts)
        env = build(dict(env_cfg, initial_states=scenes))
    peaks = imagined_peaks(env, policy, range(states), temperature, seed)
    wm_seconds = time.perf_counter() - t0
    sim = evaluate_policy(policy, tasks=[task.name], episodes_per_task=states,
                          temperature=temperature, seed=seed,
                          env=dict(image_size=size, max_episode_steps=int(task.max_episode_steps),
                                   eval_seed=eval_seed, camera=task.camera))
    by_threshold = success_by_threshold(peaks)
    # scene by scene: does the imagined peak score rank the scenes as the simulator's outcome
    # does (the two rollouts differ, closed loop each; AUROC and calibration error)
    per_scene = ranking_metrics(torch.from_numpy(peaks), torch.tensor(sim.outcomes[task.name]))
    return {"eval_seed": eval_seed, "states": states, "temperature": temperature,
            "ckpt_path": ckpt, "sim_success": sim.overall,
            "wm_success_at_env_threshold": float((peaks >= cfg.env.success_threshold).mean()),
            "env_success_threshold": float(cfg.env.success_threshold),
            "wm_success_by_threshold": by_threshold,
            "rate_matching_threshold": rate_matching_threshold(peaks, sim.overall),
            "scene_auroc": per_scene["auroc"], "scene_calibration_error": per_scene["ece"],
            "wm_seconds": round(wm_seconds, 1), "sim_seconds": round(sim.seconds, 1),
            # per scene, to read any other threshold or pairing later without a rerun
            "peaks": [round(float(p), 6) for p in peaks],
            "sim_outcomes": [bool(o) for o in sim.outcomes[task.name]]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eval-seed", type=int, default=2)
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--ckpt", default=None, help="a scripts/fit.py checkpoint (.ckpt)")
    p.add_argument("--seed", type=int, default=0, help="policy sampling and env noise seed")
    p.add_argument("--out", default=None, help="write the JSON here too")
    args, overrides = p.parse_known_args(argv)
    try:
        out = calibrate(overrides, args.eval_seed, args.states, args.num_envs, args.ckpt,
                        args.seed)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    if args.out:
        write_text(args.out, json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
