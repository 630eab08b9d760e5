"""Simulator figures: tabletop render and step cost, chunked env steps/s with and without
``skip_intermediate_renders``, scripted-expert success vs noise; LIBERO's seconds per env step
with and without skipped renders (skipped, with the reason, without the extra)."""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from wmrl.sim.episodes import evaluate_success
from wmrl.sim.expert import ScriptedExpert
from wmrl.sim.libero_adapter import LiberoEnv
from wmrl.sim.tabletop import TASK_NAMES, TabletopEnv, TabletopVecEnv

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


def skip_render_figures(num_envs: int = 8, chunk: int = 8, sizes=(64, 128), rounds: int = 5,
                        chunks_per_round: int = 3) -> list[dict]:
    """Env steps/s of ``TabletopVecEnv.step_chunk`` with ``skip_intermediate_renders`` on
    (render each chunk's last frame) and off (render every step), and their ratio: the
    reference's shape (RLinf LIBERO: chunk 8, one env per chunk row) at this machine's scale
    (8 envs, the one front camera). The two envs run the same random actions in alternating
    rounds, so both see the same machine load."""
    out = []
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (rounds * chunks_per_round + 1, num_envs, chunk, 7))
    for size in sizes:
        vecs = {skip: TabletopVecEnv(num_envs, image_size=size, max_episode_steps=10**6,
                                     terminate_on_success=False, skip_intermediate_renders=skip)
                for skip in (True, False)}
        seconds = dict.fromkeys(vecs, 0.0)
        try:
            for vec in vecs.values():
                vec.reset(options=[{"task": 0, "state_id": i} for i in range(num_envs)])
                vec.step_chunk(acts[-1])  # warm-up (GL context, caches)
            for r in range(rounds):
                for skip, vec in vecs.items():
                    t0 = time.perf_counter()
                    for k in range(r * chunks_per_round, (r + 1) * chunks_per_round):
                        vec.step_chunk(acts[k])
                    seconds[skip] += time.perf_counter() - t0
        finally:
            for vec in vecs.values():
                vec.close()
        steps = rounds * chunks_per_round * num_envs * chunk
        rate = {skip: steps / seconds[skip] for skip in vecs}
        shape = {"num_envs": num_envs, "chunk": chunk, "image": [size, size], "steps": steps}
        for skip, tag in ((True, "skip"), (False, "every")):
            out.append({"name": f"sim.chunk_steps_per_s_{size}_{tag}_render",
                        "value": round(rate[skip], 1), "unit": "env steps/s", **shape})
        out.append({"name": f"sim.skip_render_speedup_{size}",
                    "value": round(rate[True] / rate[False], 2), "unit": "x", **shape})
    return out


def libero_figures(size: int = 128, chunk: int = 8, rounds: int = 3,
                   chunks_per_round: int = 2, task: str = "libero_spatial/0") -> list[dict]:
    """Seconds per env step of ``LiberoEnv.step_chunk`` at ``size``x``size``, rendering each
    chunk's last frame vs every frame, and their ratio, with the agent view alone (the
    adapter's default) and with the wrist camera too (LIBERO's default); one env each, the
    same random actions, in alternating rounds (all four see the same machine load)."""
    if importlib.util.find_spec("libero") is None:
        return [{"name": "sim.libero", "skipped": "the LIBERO extra is not installed: "
                                                  "make libero"}]
    acts = np.random.default_rng(0).uniform(-1, 1, (rounds * chunks_per_round, chunk, 7))
    envs = {(wrist, skip): LiberoEnv(task=task, image_size=size, max_episode_steps=10**6,
                                     terminate_on_success=False, skip_intermediate_renders=skip,
                                     wrist_camera=wrist)
            for wrist in (False, True) for skip in (True, False)}
    seconds = dict.fromkeys(envs, 0.0)
    try:
        t0 = time.perf_counter()
        for env in envs.values():
            env.reset(options={"state_id": 0})  # builds the robosuite env
        build = (time.perf_counter() - t0) / len(envs)
        t0 = time.perf_counter()
        for env in envs.values():
            env.reset(options={"state_id": 1})  # a hard reset + the wait steps
        reset = (time.perf_counter() - t0) / len(envs)
        for r in range(rounds):
            for key, env in envs.items():
                t0 = time.perf_counter()
                for k in range(r * chunks_per_round, (r + 1) * chunks_per_round):
                    env.step_chunk(acts[k])
                seconds[key] += time.perf_counter() - t0
    finally:
        for env in envs.values():
            env.close()
    steps = rounds * chunks_per_round * chunk
    out = [{"name": f"sim.libero_build_and_reset_s_{size}", "value": round(build, 2), "unit": "s",
            "task": task},
           {"name": f"sim.libero_reset_s_{size}", "value": round(reset, 2), "unit": "s",
            "task": task, "num_wait_steps": envs[False, True].num_wait_steps}]
    for wrist, cams in ((False, "agentview"), (True, "agentview+wrist")):
        shape = {"task": task, "chunk": chunk, "image": [size, size], "cameras": cams,
                 "steps": steps}
        out += [{"name": f"sim.libero_step_s_{size}_{cams}_{tag}_render",
                 "value": round(seconds[wrist, skip] / steps, 4), "unit": "s/env step", **shape}
                for skip, tag in ((True, "skip"), (False, "every"))]
        out.append({"name": f"sim.libero_skip_render_speedup_{size}_{cams}",
                    "value": round(seconds[wrist, False] / seconds[wrist, True], 2), "unit": "x",
                    **shape})
    return out


def run(episodes_per_task: int = 100, max_episode_steps: int = 64,
        render_sizes: tuple[int, ...] = (64, 128), render_calls: int = 200,
        step_calls: int = 300, skip_render: dict | None = None,
        libero: dict | None = None) -> list[dict]:
    """``episodes_per_task`` x ``max_episode_steps`` per expert noise level; ``render_calls``
    and ``step_calls`` timed calls; ``skip_render`` and ``libero``: keyword arguments of
    ``skip_render_figures`` and ``libero_figures`` (their defaults when None)."""
    out = []
    for size in render_sizes:
        env = TabletopEnv(image_size=size)
        env.reset(options={"task": 0, "state_id": 0})
        ms = _time_per_call(env.render, render_calls)
        out.append({"name": f"sim.render_ms_{size}", "value": round(ms, 3), "unit": "ms/frame"})
        env.close()
    env = TabletopEnv(render=False, max_episode_steps=10**6, terminate_on_success=False)
    env.reset(options={"task": 0, "state_id": 0})
    rng = np.random.default_rng(0)
    ms = _time_per_call(lambda: env.step(rng.uniform(-1, 1, 7)), step_calls)
    out.append({"name": "sim.step_ms_physics", "value": round(ms, 3), "unit": "ms/step",
                "substeps": env.n_substeps})
    env = TabletopEnv(image_size=64, max_episode_steps=10**6, terminate_on_success=False)
    env.reset(options={"task": 0, "state_id": 0})
    ms = _time_per_call(lambda: env.step(rng.uniform(-1, 1, 7)), step_calls)
    out.append({"name": "sim.step_ms_with_render_64", "value": round(ms, 3), "unit": "ms/step"})
    env.close()
    out.extend(skip_render_figures(**(skip_render or {})))
    out.extend(libero_figures(**(libero or {})))
    for level, knobs in NOISE_LEVELS.items():
        t0 = time.perf_counter()
        rates = evaluate_success(ScriptedExpert(**knobs, seed=1), list(TASK_NAMES),
                                 episodes_per_task, num_envs=8, render=False,
                                 max_episode_steps=max_episode_steps)
        out.append({"name": f"sim.expert_success_{level}",
                    "value": round(float(np.mean(list(rates.values()))), 3), "unit": "fraction",
                    "per_task": rates, "knobs": knobs,
                    "episodes": episodes_per_task * len(TASK_NAMES),
                    "max_episode_steps": max_episode_steps,
                    "seconds": round(time.perf_counter() - t0, 1)})
    return out


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
