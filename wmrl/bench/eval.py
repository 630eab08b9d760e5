"""Simulator evaluation throughput: episodes/s of ``evaluate_policy`` with the tiny OpenVLA-OFT
(64-px frames, 64 control steps = 8 chunks, 16 envs in one process), split into policy and
simulator time. ``run``'s arguments shrink it (tests: a few episodes of one chunk)."""

from __future__ import annotations

import time

import torch

EPISODES = 16
ENV = {"image_size": [64, 64], "max_episode_steps": 64}  # fixed: figures comparable over commits


def run(episodes: int = EPISODES, num_envs: int = 16,
        max_episode_steps: int = ENV["max_episode_steps"],
        image_size: int = ENV["image_size"][0]) -> list[dict]:
    from wmrl.eval.evaluate import evaluate_policy
    from wmrl.policies.configs import tiny_config
    from wmrl.policies.openvla_oft import build_policy

    cfg = tiny_config(image_size=32)
    cfg["norm_stats"] = {"tabletop": {"action": {"q01": [-1.0] * 6 + [0.0],
                                                 "q99": [1.0] * 6 + [1.0],
                                                 "mask": [True] * 6 + [False]}}}
    policy = build_policy(config=cfg, unnorm_key="tabletop")
    policy_s = [0.0]
    sample = policy.sample

    def timed(*a, **k):  # random weights never succeed: every episode runs all its steps
        t0 = time.perf_counter()
        out = sample(*a, **k)
        policy_s[0] += time.perf_counter() - t0
        return out

    policy.sample = timed
    env = {"image_size": [image_size, image_size], "max_episode_steps": max_episode_steps}
    t0 = time.perf_counter()
    res = evaluate_policy(policy, tasks=["red_on_plate"], episodes_per_task=episodes,
                          temperature=1.0, num_envs=num_envs, env=env)
    total = time.perf_counter() - t0
    ctx = {"episodes": res.episodes, "steps_per_episode": max_episode_steps,
           "threads": torch.get_num_threads(), "policy_seconds": round(policy_s[0], 2),
           "seconds": round(total, 2)}
    return [
        {"name": "eval.sim_episodes_per_s", "value": res.episodes / total, "unit": "episodes/s",
         **ctx},
        {"name": "eval.policy_time_fraction", "value": policy_s[0] / total, "unit": "fraction",
         **ctx},
    ]


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
