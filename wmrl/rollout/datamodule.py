"""``RolloutDataModule``: a Lightning DataModule whose "dataset" is fresh on-policy rollouts.

Each ``next()`` on the train stream runs ``rollout_epochs`` episodes of every env on Ray
actors and returns one trajectory batch (see ``wmrl.rollout.engine``). Rollouts are made
lazily, when the trainer asks for the batch, so they always use the weights of the last
optimizer step (the GRPOModule pulls batches itself: no prefetch of stale rollouts).
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import lightning as L
import numpy as np
import ray
import torch

from wmrl.config import to_container
from wmrl.rollout.engine import PLACEMENTS, RolloutPlan, busy_breakdown, collect_rollouts
from wmrl.rollout.weight_sync import WeightSender, push_weights
from wmrl.rollout.workers import RolloutActor


class RolloutDataModule(L.LightningDataModule):
    def __init__(
        self,
        policy: dict,
        env: dict,
        num_envs: int = 32,
        group_size: int = 8,
        rollout_epochs: int = 1,
        max_episode_steps: int = 64,
        chunk: int = 8,
        temperature: float = 1.6,
        placement: str = "disaggregated",
        pipeline_stages: int = 1,
        num_env_workers: int = 1,
        num_rollout_workers: int = 1,
        worker_cpus: float = 1.0,
        worker_threads: int | None = 1,
        ray_address: str | None = None,
        ray_num_cpus: int | None = None,
        actor_start_timeout_s: float = 600.0,
        weight_sync: dict | None = None,
        tracing: bool = False,
        seed: int = 0,
    ):
        super().__init__()
        self.policy_cfg = to_container(policy)
        self.env_cfg = to_container(env)
        self.num_envs = num_envs
        self.group_size = group_size
        self.rollout_epochs = rollout_epochs
        self.num_chunks = max_episode_steps // chunk
        self.max_episode_steps = max_episode_steps
        self.chunk = chunk
        self.temperature = temperature
        if placement not in PLACEMENTS:
            raise ValueError(f"rollout.placement={placement!r}: choose one of {PLACEMENTS}")
        self.placement = placement
        self.stages = pipeline_stages
        self.num_env_workers = num_env_workers
        self.num_rollout_workers = num_rollout_workers
        self.worker_cpus = worker_cpus
        self.worker_threads = worker_threads
        self.ray_address = ray_address
        self.ray_num_cpus = ray_num_cpus
        self.actor_start_timeout_s = actor_start_timeout_s
        self.seed = seed
        self.rollout_step = 0  # batches made so far; seeds continue from it on resume
        self.plan: RolloutPlan | None = None
        sync = dict(to_container(weight_sync) or {})
        self.zero_copy_weights = bool(sync.pop("zero_copy", False))
        self.sender = WeightSender(**sync)
        self.tracing = tracing
        self.trace_events: list[dict] = []  # actors' events of the last step(s)
        self._started_ray = False
        self.last_timing: dict[str, float] = {}

    # ---- lifecycle -------------------------------------------------------------------
    @property
    def rollout_workers(self) -> list[Any]:
        """The actors that hold a policy copy (weight sync targets)."""
        return self.plan.policy_actors if self.plan else []

    def setup(self, stage: str | None = None) -> None:
        if self.plan is not None:
            return
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=self.ray_num_cpus, include_dashboard=False,
                         log_to_driver=False)
                self._started_ray = True
        if self.trainer is not None and self.trainer.world_size > 1:
            # every trainer rank drives its own actors: give each different episodes
            self.seed += 7919 * self.trainer.global_rank
        self.plan = self.build_plan()
        self._wait_for_actors()

    def _wait_for_actors(self) -> None:
        """Fail loudly (not hang) when Ray cannot place the actors."""
        try:
            ray.get([a.ready.remote() for a in self.plan.actors],
                    timeout=self.actor_start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            need = len(self.plan.actors) * self.worker_cpus
            have = ray.cluster_resources().get("CPU", 0)
            raise RuntimeError(
                f"rollout actors did not start within rollout.actor_start_timeout_s="
                f"{self.actor_start_timeout_s}: they need {need} CPUs "
                f"({len(self.plan.actors)} actors x rollout.worker_cpus={self.worker_cpus}; "
                f"more per trainer rank) and the Ray cluster has {have} in all. Lower "
                "rollout.worker_cpus or give Ray more resources.") from None

    def build_plan(self) -> RolloutPlan:
        actor = ray.remote(RolloutActor).options(num_cpus=self.worker_cpus)
        env = dict(self.env_cfg, num_envs=self.num_envs // self.num_env_workers,
                   group_size=self.group_size, chunk=self.chunk,
                   max_episode_steps=self.max_episode_steps)
        common = dict(stages=self.stages, num_threads=self.worker_threads,
                      tracing=self.tracing)
        policy = dict(policy=self.policy_cfg, zero_copy_weights=self.zero_copy_weights)
        if self.placement == "collocated":
            both = [actor.remote(env=env, **policy, **common, name=f"collocated-{i}")
                    for i in range(self.num_env_workers)]
            return RolloutPlan(both, both, self.stages, collocated=True)
        envs = [actor.remote(env=env, **common, name=f"env-{i}")
                for i in range(self.num_env_workers)]
        policies = [actor.remote(**policy, **common, name=f"policy-{i}")
                    for i in range(self.num_rollout_workers)]
        return RolloutPlan(envs, policies, self.stages)

    def teardown(self, stage: str | None = None) -> None:
        for a in self.plan.actors if self.plan else []:
            ray.kill(a)
        self.plan = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def state_dict(self) -> dict[str, Any]:
        return {"rollout_step": self.rollout_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rollout_step = int(state_dict["rollout_step"])

    # ---- data ------------------------------------------------------------------------
    def train_dataloader(self) -> Iterator[dict[str, Any]]:
        return _RolloutStream(self)

    def next_batch(self) -> dict[str, Any]:
        start = time.time()
        batch = collect_rollouts(self.plan, self.num_chunks, self.temperature,
                                 self.rollout_epochs, seed=self.seed * 100_003 + self.rollout_step)
        end = time.time()
        self.rollout_step += 1
        records = ray.get([a.pop_step_record.remote() for a in self.plan.actors])
        busy = [iv for intervals, _, _ in records for iv in intervals]
        self.trace_events += [ev for _, events, _ in records for ev in events]
        self.last_timing = {"rollout_s": end - start, **busy_breakdown(busy, start, end),
                            "reward_s": sum(r for _, _, r in records)}
        return to_torch_batch(batch)

    # ---- weight sync -----------------------------------------------------------------
    def sync_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Send the trainer's weights to every policy actor as ``version``; returns seconds."""
        t0 = time.perf_counter()
        push_weights(self.sender, state_dict, version, self.rollout_workers)
        return time.perf_counter() - t0


class _RolloutStream:
    """Endless iterable of rollout batches (Lightning stops it via trainer.max_steps)."""

    def __init__(self, dm: RolloutDataModule):
        self.dm = dm

    def __iter__(self) -> "_RolloutStream":
        return self

    def __next__(self) -> dict[str, Any]:
        return self.dm.next_batch()


def to_torch_batch(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
            for k, v in batch.items()}
