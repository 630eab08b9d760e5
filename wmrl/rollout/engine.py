"""Drive env and rollout actors through whole episodes and assemble one trajectory batch.

The driver only chains object references: a policy sample's action output goes straight
into the env actor's ``chunk_step`` and its observation straight back into the next sample,
so no frame or action passes through the driver until the batch is gathered at the end.

Batch layout (numpy; N = epochs x num_envs trajectories, groups consecutive; K chunks,
C steps per chunk, L tokens per chunk)::

    image      uint8   [N, K, H, W, 3]   observation the policy saw before chunk k
    tokens     int64   [N, K, L]         sampled action bins
    logprobs   float32 [N, K, L]         log-probs at sampling time (the "old" policy)
    rewards    float32 [N, K*C]          per env step
    dones      bool    [N, K*C]          termination or truncation
    success    bool    [N]               success at any step of the episode
    task       list[str] of N
    version    int                       policy weight version every sample used
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray


def collect_rollouts(
    env_workers: list[Any],
    rollout_workers: list[Any],
    num_chunks: int,
    temperature: float,
    epochs: int,
    seed: int,
) -> dict[str, Any]:
    """Run ``epochs`` x all env workers for ``num_chunks`` chunks each; returns the batch."""
    for i, worker in enumerate(rollout_workers):
        worker.set_seed.remote(seed * 1000 + i)
    pending = []  # per (epoch, env worker): (sample record refs, step record refs)
    for epoch in range(epochs):
        obs = [w.reset.remote(seed=(seed * epochs + epoch) * 1000 + j)
               for j, w in enumerate(env_workers)]
        records: list[tuple[list, list]] = [([], []) for _ in env_workers]
        for _ in range(num_chunks):
            for j, env in enumerate(env_workers):
                policy = rollout_workers[j % len(rollout_workers)]
                actions, sample = policy.sample.options(num_returns=2).remote(obs[j], temperature)
                obs[j], step = env.chunk_step.options(num_returns=2).remote(actions)
                records[j][0].append(sample)
                records[j][1].append(step)
        pending.extend(records)
    parts = [assemble(ray.get(samples), ray.get(steps)) for samples, steps in pending]
    return concat(parts)


def assemble(samples: list[dict], steps: list[dict]) -> dict[str, Any]:
    """K per-chunk records of one env worker -> [B, K, ...] trajectory arrays."""
    versions = {s["version"] for s in samples}
    if len(versions) != 1:
        raise RuntimeError(f"one rollout mixed policy weight versions {sorted(versions)}")
    b = samples[0]["tokens"].shape[0]
    return {
        "image": np.stack([s["image"] for s in samples], axis=1),
        "tokens": np.stack([s["tokens"] for s in samples], axis=1).astype(np.int64),
        "logprobs": np.stack([s["logprobs"] for s in samples], axis=1),
        "rewards": np.concatenate([s["rewards"] for s in steps], axis=1).reshape(b, -1),
        "dones": np.concatenate(
            [s["terminations"] | s["truncations"] for s in steps], axis=1
        ).reshape(b, -1),
        "success": np.any(np.stack([s["success"] for s in steps], axis=1), axis=1),
        "task": list(samples[0]["task"]),
        "version": versions.pop(),
    }


def concat(parts: list[dict[str, Any]]) -> dict[str, Any]:
    versions = {p["version"] for p in parts}
    if len(versions) != 1:
        raise RuntimeError(f"rollout batch mixed policy weight versions {sorted(versions)}")
    out = {k: np.concatenate([p[k] for p in parts], axis=0)
           for k in ("image", "tokens", "logprobs", "rewards", "dones", "success")}
    out["task"] = [t for p in parts for t in p["task"]]
    out["version"] = versions.pop()
    return out
