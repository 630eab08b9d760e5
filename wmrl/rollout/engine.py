"""Drive rollout actors through whole episodes and assemble one trajectory batch.

The driver only chains object references: a sample's action output goes straight into
the env actor's ``chunk_step`` and its observation straight back into the next sample, so
no frame or action passes through the driver until the batch is gathered at the end.

Placement (``ActorLayout``):

* ``collocated``: each actor holds env + policy and they take turns (the idle role is
  offloaded on an accelerator); observations never leave the actor.
* ``disaggregated``: env actors and policy actors are separate processes/devices.
* ``hybrid``: as disaggregated, with envs split into ``stages`` so that while the world
  model steps one stage, the policy samples the next (actor mailboxes are the bounded
  queue between them: at most ``stages`` chunks in flight per env actor).

All placements use the same stages and seeds, hence the same trajectories. The result is
a :class:`wmrl.interfaces.TrajectoryBatch` of numpy arrays (layout in its docstring).

Bootstrap overlap: a reset does not depend on the policy, so the DataModule starts the next
step's epoch-0 resets (``issue_resets``) as soon as a batch is gathered; they run on the env
actors while the trainer updates, and ``collect_rollouts(resets=...)`` chains the step's
first samples onto them. An actor runs its tasks one at a time in submission order, so
every env sees the same calls in the same order as without overlap: same trajectories.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from wmrl.interfaces import TrajectoryBatch

PLACEMENTS = ("collocated", "disaggregated", "hybrid")


@dataclass
class ActorLayout:
    """Which rollout actors one trainer rank drives (built by ``ActorPool``): the env actors,
    the policy actors (the same handles when collocated) and the stages each env is split into."""
    env_actors: list[Any]  # hold the envs (collocated: also the policy)
    policy_actors: list[Any]  # sample actions; the same handles as env_actors if collocated
    stages: int = 1
    collocated: bool = False

    @property
    def actors(self) -> list[Any]:
        return list({id(a): a for a in self.env_actors + self.policy_actors}.values())


def call_seed(seed: int, epoch: int, actor: int, stage: int, chunk: int) -> int:
    """A distinct, placement-independent seed per sampling call (fits any RNG's seed)."""
    return ((((seed * 1009 + epoch) * 1013 + actor) * 1019 + stage) * 1021 + chunk) % (2**31 - 1)


def reset_seed(seed: int, epoch: int, actor: int, stage: int) -> int:
    """The seed of one env stage's reset (its episodes' initial states) in step ``seed``."""
    return call_seed(seed + 1, epoch, actor, stage, 0)


def issue_resets(layout: ActorLayout, seed: int, epoch: int = 0) -> dict[tuple[int, int], Any]:
    """Start every env stage's reset for ``epoch`` of step ``seed``; -> {(env actor index,
    stage): observation ref} (collocated: the observation stays in the actor, the ref is
    None-valued)."""
    return {(j, s): env.reset.remote(s, seed=reset_seed(seed, epoch, j, s))
            for j, env in enumerate(layout.env_actors) for s in range(layout.stages)}


class RolloutTimeout(RuntimeError):
    """A rollout step did not finish within its deadline."""


def collect_rollouts(layout: ActorLayout, num_chunks: int, temperature: float, epochs: int,
                     seed: int, timeout_s: float | None = None,
                     resets: dict[tuple[int, int], Any] | None = None) -> TrajectoryBatch:
    """Run ``epochs`` x every env actor x every stage for ``num_chunks`` chunks; the records
    must arrive within ``timeout_s`` (None: wait forever). A dead actor raises Ray's
    ``RayActorError``; the same ``seed`` re-runs the same step. ``resets``: epoch 0's resets,
    already issued (``issue_resets(layout, seed)``, e.g. during the previous update; the
    caller makes sure the actors still hold them); later epochs reset here."""
    pending = []  # per (epoch, env actor, stage): (sample record refs, step record refs)
    for epoch in range(epochs):
        started = resets if epoch == 0 and resets is not None else \
            issue_resets(layout, seed, epoch)
        streams = []
        for j, env in enumerate(layout.env_actors):
            policy = layout.policy_actors[j % len(layout.policy_actors)]
            for s in range(layout.stages):
                streams.append((j, s, env, policy, started[j, s], [], []))
        for k in range(num_chunks):
            for i, (j, s, env, policy, obs, samples, steps) in enumerate(streams):
                actions, sample = policy.sample.options(num_returns=2).remote(
                    s, None if layout.collocated else obs, temperature,
                    call_seed(seed, epoch, j, s, k))
                obs, step = env.chunk_step.options(num_returns=2).remote(s, actions)
                samples.append(sample)
                steps.append(step)
                streams[i] = (j, s, env, policy, obs, samples, steps)
        pending.extend((samples, steps) for *_, samples, steps in streams)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    parts = []
    for i, (samples, steps) in enumerate(pending):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            records = ray.get(samples + steps, timeout=left)
        except ray.exceptions.GetTimeoutError:
            raise RolloutTimeout(
                f"rollout step (seed {seed}) did not finish within rollout.step_timeout_s="
                f"{timeout_s}: still waiting for the {num_chunks} sample + chunk_step records "
                f"of env stream {i} of {len(pending)} (an actor hangs or the cluster is "
                "overloaded; raise rollout.step_timeout_s for slower models)") from None
        parts.append(assemble(records[:len(samples)], records[len(samples):]))
    return concat(parts)


def assemble(samples: list[dict], steps: list[dict]) -> dict[str, Any]:
    """K per-chunk records of one env stage -> [B, K, ...] trajectory arrays."""
    b = samples[0]["tokens"].shape[0]
    checked = all("resample_success" in s for s in steps)
    return {
        "resample_success": steps[-1]["resample_success"] if checked else None,
        "image": np.stack([s["image"] for s in samples], axis=1),
        "tokens": np.stack([s["tokens"] for s in samples], axis=1).astype(np.int64),
        "logprobs": np.stack([s["logprobs"] for s in samples], axis=1),
        "rewards": np.concatenate([s["rewards"] for s in steps], axis=1).reshape(b, -1),
        "dones": np.concatenate(
            [s["terminations"] | s["truncations"] for s in steps], axis=1).reshape(b, -1),
        "success": np.any(np.stack([s["success"] for s in steps], axis=1), axis=1),
        "task": list(samples[0]["task"]),
        "versions": {s["version"] for s in samples},
    }


def concat(parts: list[dict[str, Any]]) -> TrajectoryBatch:
    versions = set().union(*(p["versions"] for p in parts))
    if len(versions) != 1:
        raise RuntimeError(f"one rollout batch mixed policy weight versions {sorted(versions)}")
    arrays = {k: np.concatenate([p[k] for p in parts], axis=0) for k in TrajectoryBatch.ARRAYS}
    checks = [p["resample_success"] for p in parts]
    return TrajectoryBatch(**arrays, task=[t for p in parts for t in p["task"]],
                           version=versions.pop(),
                           resample_success=None if any(c is None for c in checks)
                           else np.concatenate(checks))


def busy_breakdown(intervals: list[tuple[str, float, float]], start: float,
                   end: float) -> dict[str, float]:
    """Seconds per role inside [start, end], and idle = time when no role was busy."""
    out: dict[str, float] = {}
    spans = []
    for role, t0, t1 in intervals:
        t0, t1 = max(t0, start), min(t1, end)
        if t1 > t0:
            out[f"{role}_s"] = out.get(f"{role}_s", 0.0) + (t1 - t0)
            spans.append((t0, t1))
    covered, cur_start, cur_end = 0.0, None, None
    for t0, t1 in sorted(spans):
        if cur_end is None or t0 > cur_end:
            if cur_end is not None:
                covered += cur_end - cur_start
            cur_start, cur_end = t0, t1
        else:
            cur_end = max(cur_end, t1)
    if cur_end is not None:
        covered += cur_end - cur_start
    out["idle_s"] = max(0.0, (end - start) - covered)
    return out
