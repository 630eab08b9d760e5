"""Tabletop simulator figures: render and step cost, scripted-expert success vs noise."""

from __future__ import annotations

import time

import numpy as np

from wmrl.pipeline.sim_rollout import evaluate_success
from wmrl.sim.expert import ScriptedExpert
from wmrl.sim.tabletop import TASK_NAMES, TabletopEnv

NOISE_LEVELS = {
    "none": {},
    "medium": {"noise_std": 0.8},
    "high": {"noise_std": 1.0},
}


def _time_per_call(fn, n: int) -> float:
    fn()  # warm-up (GL context, caches)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e3


def run(episodes_per_task: int = 100, max_episode_steps: int = 64) -> list[dict]:
    out = []
    for size in (64, 128):
        env = TabletopEnv(image_size=size)
        env.reset(options={"task": 0, "state_id": 0})
        ms = _time_per_call(env.render, 200)
        out.append({"name": f"sim.render_ms_{size}", "value": round(ms, 3), "unit": "ms/frame"})
        env.close()
    env = TabletopEnv(render=False, max_episode_steps=10**6, terminate_on_success=False)
    env.reset(options={"task": 0, "state_id": 0})
    rng = np.random.default_rng(0)
    ms = _time_per_call(lambda: env.step(rng.uniform(-1, 1, 7)), 300)
    out.append({"name": "sim.step_ms_physics", "value": round(ms, 3), "unit": "ms/step",
                "substeps": env.n_substeps})
    env = TabletopEnv(image_size=64, max_episode_steps=10**6, terminate_on_success=False)
    env.reset(options={"task": 0, "state_id": 0})
    ms = _time_per_call(lambda: env.step(rng.uniform(-1, 1, 7)), 300)
    out.append({"name": "sim.step_ms_with_render_64", "value": round(ms, 3), "unit": "ms/step"})
    env.close()
    for level, knobs in NOISE_LEVELS.items():
        t0 = time.perf_counter()
        rates = evaluate_success(ScriptedExpert(**knobs, seed=1), list(TASK_NAMES),
                                 episodes_per_task, num_envs=8, render=False,
                                 max_episode_steps=max_episode_steps)
        out.append({"name": f"sim.expert_success_{level}",
                    "value": round(float(np.mean(list(rates.values()))), 3), "unit": "fraction",
                    "per_task": rates, "knobs": knobs, "episodes": episodes_per_task * 3,
                    "max_episode_steps": max_episode_steps,
                    "seconds": round(time.perf_counter() - t0, 1)})
    return out


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
