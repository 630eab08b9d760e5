"""The world model's success threshold read closed loop against the simulator
(``scripts/calibrate_threshold.py``): the policy runs in the fit config's world-model env and in
the simulator from the same held-out scenes; the simulator's success beside the world model's
at each threshold (``wmrl.finetune.threshold_calibration``), the threshold whose imagined
success is closest to the simulator's, and how well each scene's imagined peak ranks the
simulator's outcomes (AUROC, calibration error)."""

from __future__ import annotations

import tempfile
import time

import torch

from wmrl.build import build, to_container
from wmrl.config import check_held_out_seed, compose_config
from wmrl.envs.initial_states import write_initial_states
from wmrl.eval.evaluate import evaluate_policy
from wmrl.eval.policy_checkpoint import load_policy
from wmrl.finetune.reward_evaluation import ranking_metrics
from wmrl.finetune.threshold_calibration import (
    imagined_peaks,
    rate_matching_threshold,
    success_by_threshold,
)
from wmrl.sim.tabletop import initial_frames


def calibrate(overrides: list[str], eval_seed: int = 2, states: int = 256, num_envs: int = 64,
              ckpt: str | None = None, seed: int = 0) -> dict:
    """The fit config (``overrides``)'s policy, with ``ckpt``'s weights, closed loop in its
    world-model env and in the simulator on ``states`` scenes of ``eval_seed`` (a reported or
    trained-on scene set is refused: ``ConfigError``); the figures the module docstring lists,
    and each scene's imagined peak and simulator outcome."""
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
