"""``RolloutDataModule``: fresh on-policy rollouts for ``GRPOModule``'s step.

``rollout(weights)`` runs ``rollout_epochs`` episodes of every env on this rank's Ray actors
and returns one trajectory batch (``wmrl.rollout.engine``) made with the weights the actors
hold (``sync_weights``). The module's step calls both, in order (``wmrl.module``): the
rollout is made when the step asks for it, never ahead of the weights. Only the next step's
env resets, which do not depend on the policy, start ahead: as soon as a batch is gathered
they run on the env actors while the trainer updates (``rollout.overlap_resets``; not for
collocated actors on an accelerator, see ``setup``).

Two parts: ``ActorPool`` (Ray, placement, restarts: ``wmrl.rollout.actor_pool``) and
``ActorSync`` (policy and world-model weights to the actors: ``wmrl.rollout.actor_sync``).
Every trainer rank starts its own actors. Lightning's train loader is only the step counter
(the module pulls its data itself).
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import asdict
from typing import Any, Callable, Iterator

import lightning as L
import ray
import torch

from wmrl.build import to_container
from wmrl.errors import ConfigError
from wmrl.interfaces import TrajectoryBatch
from wmrl.rollout import placement as place
from wmrl.rollout.actor_pool import ActorPool
from wmrl.rollout.actor_sync import ActorSync
from wmrl.rollout.config import RolloutConfig
from wmrl.rollout.engine import (
    PLACEMENTS,
    ActorLayout,
    RolloutTimeout,
    busy_breakdown,
    collect_rollouts,
    issue_resets,
    reset_seed,
)
from wmrl.weights.dtypes import to_dtype
from wmrl.weights.lora import is_adapter_key

log = logging.getLogger(__name__)

Weights = Callable[[], dict[str, torch.Tensor]]


class RolloutDataModule(L.LightningDataModule):
    def __init__(self, policy: dict, env: dict, seed: int = 0, tracing: bool = False,
                 **settings: Any):
        """``policy`` and ``env`` specs (the env scores with its ``reward``) and the rollout
        group's ``settings`` (keyword arguments: ``wmrl.rollout.config.RolloutConfig``'s
        fields, which hold their defaults and ranges)."""
        super().__init__()
        cfg = self.settings = RolloutConfig.of(settings)
        env_cfg = to_container(env)
        # the rollout group owns the env sizes: an env config that says otherwise is refused
        self.env_sizes = dict(num_envs=cfg.num_envs // max(cfg.num_env_workers, 1),
                              group_size=cfg.group_size, chunk=cfg.chunk,
                              max_episode_steps=cfg.max_episode_steps)
        for key, value in self.env_sizes.items():
            if key in env_cfg and env_cfg[key] != value:
                per = " per env worker" if key == "num_envs" else ""
                raise ConfigError(
                    f"env.{key}={env_cfg[key]} conflicts with the rollout's "
                    f"{value}{per} (rollout.{key}): the rollout group sets env sizes; remove "
                    f"env.{key}")
        if cfg.placement not in PLACEMENTS:
            raise ValueError(f"rollout.placement={cfg.placement!r}: choose one of {PLACEMENTS}")
        env_resources = dict(cfg.env_resources or {})
        policy_resources = dict(cfg.policy_resources or {})
        place.check_roles(cfg.device, cfg.placement,
                          {"env": env_resources, "policy": policy_resources})
        self.num_envs = cfg.num_envs
        self.group_size = cfg.group_size
        self.rollout_epochs = cfg.rollout_epochs
        self.num_chunks = cfg.max_episode_steps // cfg.chunk
        self.temperature = cfg.temperature
        self.placement = cfg.placement
        self.step_timeout_s = cfg.step_timeout_s
        self.max_actor_restarts = cfg.max_actor_restarts
        self.overlap_resets = cfg.overlap_resets  # asked for; setup decides where it is safe
        self.overlapping = False  # the next step's resets run during the update
        self.on_trainer_card = False  # collocated actors computing on the trainer's card
        # (seed of the step, {(env actor, stage): obs ref}) of the resets started ahead; not
        # checkpointed: after a resume the first step resets itself, with the same seeds
        self._resets_ahead: tuple[int, dict] | None = None
        self.seed = seed
        self.rollout_step = 0  # batches made so far; seeds continue from it on resume
        sync = asdict(cfg.weight_sync)
        # the actors' copy: the trainer's float32 master weights go out in policy_dtype
        policy = to_container(policy)
        self.policy_dtype = None
        if cfg.policy_dtype is not None:
            self.policy_dtype = to_dtype(cfg.policy_dtype, "rollout.policy_dtype")
            policy = dict(policy, dtype=cfg.policy_dtype)
        self.pool = ActorPool(
            policy=policy, env=dict(env_cfg, **self.env_sizes),
            placement=cfg.placement, stages=cfg.pipeline_stages,
            num_env_workers=cfg.num_env_workers, num_rollout_workers=cfg.num_rollout_workers,
            worker_cpus=cfg.worker_cpus, worker_threads=cfg.worker_threads, device=cfg.device,
            env_resources=env_resources, policy_resources=policy_resources,
            compute_on_cpu=cfg.compute_on_cpu, ray_address=cfg.ray_address,
            ray_num_cpus=cfg.ray_num_cpus, actor_start_timeout_s=cfg.actor_start_timeout_s,
            max_actor_restarts=cfg.max_actor_restarts, tracing=tracing,
            zero_copy_weights=bool(sync.pop("zero_copy")))
        self.sync = ActorSync(self.pool, cfg.step_timeout_s, **sync)
        self._trace_events: list[dict] = []  # actors' events since pop_trace_events
        self.last_timing: dict[str, float] = {}

    # ---- lifecycle -------------------------------------------------------------------
    @property
    def layout(self) -> ActorLayout | None:
        return self.pool.layout

    @property
    def rollout_workers(self) -> list[Any]:
        """The actors that hold a policy copy (weight sync targets)."""
        return self.pool.policy_actors

    @property
    def actor_restarts(self) -> int:
        return self.pool.restarts

    @property
    def sender(self) -> Any:
        return self.sync.sender

    def setup(self, stage: str | None = None) -> None:
        if self.layout is not None:
            return
        t = self.trainer
        if t is None:
            self.start()
        else:
            self.start(t.global_rank, t.world_size, t.strategy.root_device)

    def start(self, rank: int = 0, world_size: int = 1,
              trainer_device: torch.device | str = "cpu") -> None:
        """Start (or join) Ray and this trainer rank's actors, then the weight sync."""
        self.seed += 7919 * rank  # every trainer rank drives its own actors: other episodes
        self.pool.start(world_size, trainer_device)
        # Collocated actors on an accelerator move their env models off the card while the
        # trainer updates (RolloutActor.rest); a reset during the update would move them back
        # and hold the card beside the trainer's weights, optimizer state and activations. So
        # there the resets wait for the rollout; on the CPU nothing moves and they overlap.
        on_card = self.on_trainer_card = self.pool.on_trainer_card()
        self.overlapping = self.overlap_resets and not on_card
        if self.overlap_resets and on_card:
            log.info("rollout.overlap_resets: off for collocated actors on an accelerator "
                     "(the env models stay off the card during the update)")
        self.sync.connect()

    def placement_report(self) -> list[dict]:
        """Every actor's node, Ray accelerator ids and resolved device."""
        return self.pool.placement_report()

    def shares_trainer_device(self) -> bool:
        """The rollout runs on the trainer's own card (collocated on an accelerator): the
        trainer's state must leave it meanwhile."""
        return self.layout is not None and self.on_trainer_card  # decided once, at start

    def teardown(self, stage: str | None = None) -> None:
        self.pool.stop()
        self.sync.close()
        self._resets_ahead = None

    def state_dict(self) -> dict[str, Any]:
        return {"rollout_step": self.rollout_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rollout_step = int(state_dict["rollout_step"])
        self._resets_ahead = None  # made for another step

    # ---- data ------------------------------------------------------------------------
    def train_dataloader(self) -> Iterator[int]:
        """The training step's index (endless; ``trainer.max_steps`` ends the run): the
        module makes its batch itself (``rollout``), after the weights it needs."""
        return itertools.count(self.rollout_step)

    def _step_seed(self, step: int) -> int:
        return self.seed * 100_003 + step

    def rollout(self, weights: Weights | None = None) -> TrajectoryBatch:
        """One trajectory batch, made with the policy version the actors hold. When an
        actor dies meanwhile it is restarted and given ``weights()`` (the trainer's weights
        of that version) and the same seed makes the same batch."""
        start = time.time()
        seed = self._step_seed(self.rollout_step)
        ahead, self._resets_ahead = self._resets_ahead, None
        failures = 0
        while True:
            try:
                resets = self._held_resets(seed, ahead) if ahead else None
                batch = collect_rollouts(self.layout, self.num_chunks, self.temperature,
                                         self.rollout_epochs, seed, self.step_timeout_s,
                                         resets=resets)
                if self.layout.collocated:  # free the device for the trainer's update
                    ray.get([a.rest.remote() for a in self.layout.actors],
                            timeout=self.step_timeout_s)
                break
            except ray.exceptions.RayActorError as err:
                ahead = None  # a restarted actor lost the resets made ahead: reset again
                failures += 1
                if failures > self.max_actor_restarts:
                    raise RuntimeError(
                        f"rollout step {self.rollout_step}: a rollout actor died {failures} "
                        f"times (rollout.max_actor_restarts={self.max_actor_restarts}); last: "
                        f"{self.pool.describe(err)}") from None
                self._recover(err, weights)  # then the same seed makes the same batch
        end = time.time()
        self.rollout_step += 1
        records = ray.get([a.pop_step_record.remote() for a in self.layout.actors],
                          timeout=self.step_timeout_s)
        busy = [iv for intervals, _, _ in records for iv in intervals]
        self._trace_events += [ev for _, events, _ in records for ev in events]
        # env time before the step began: the resets that ran during the last update
        ahead_s = sum(min(t1, start) - t0 for role, t0, t1 in busy if role == "env" and t0 < start)
        self.last_timing = {"rollout_s": end - start, **busy_breakdown(busy, start, end),
                            "reward_s": sum(r for _, _, r in records), "reset_ahead_s": ahead_s}
        if self.overlapping:  # the next step's resets run while the trainer updates
            next_seed = self._step_seed(self.rollout_step)
            self._resets_ahead = (next_seed, issue_resets(self.layout, next_seed))
        return batch.to_torch()

    def _recover(self, err: Exception, weights: Weights | None) -> None:
        """After an actor died mid-rollout: restart it and bring every policy actor back to
        the version the rollout is made with."""
        self.sync.restore(err, f"rollout step {self.rollout_step}")
        if self.sync.policy_version is None:
            return  # nothing synced yet
        if weights is None:
            raise RuntimeError("a rollout actor was restarted but the rollout was given no "
                               "weights to re-sync it (rollout(weights=...))") from None
        self.sync.policy(self._for_actors(weights()), self.sync.policy_version)

    def _held_resets(self, seed: int, ahead: tuple[int, dict]) -> dict | None:
        """The resets started ahead for step ``seed`` if every env actor still holds them
        (waits for them to finish); None if they were made for another step or an actor
        was restarted since (Ray's new process holds no reset). A dead actor raises."""
        ahead_seed, refs = ahead
        if ahead_seed != seed:
            return None
        checks = [self.layout.env_actors[j].holds_reset.remote(s, reset_seed(seed, 0, j, s))
                  for j, s in refs]
        try:
            held = ray.get(checks, timeout=self.step_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RolloutTimeout(
                f"rollout step (seed {seed}): the env resets started during the last update "
                f"did not finish within rollout.step_timeout_s={self.step_timeout_s}") from None
        if all(held):
            return refs
        log.warning("rollout step %d: an env actor no longer holds the reset started ahead "
                    "(Ray restarted it, or the reset failed); resetting again",
                    self.rollout_step)
        return None

    def step_timing(self) -> dict[str, float]:
        """Seconds of the last rollout by part (``wmrl.interfaces.RolloutSource``)."""
        return dict(self.last_timing)

    def pop_trace_events(self) -> list[dict]:
        """The actors' trace spans since the last call."""
        events, self._trace_events = self._trace_events, []
        return events

    # ---- weight sync (wmrl.rollout.actor_sync) ---------------------------------------
    @property
    def synced_version(self) -> int | None:
        """The policy version every policy actor holds (None before the first sync)."""
        return self.sync.policy_version

    def sync_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Send the trainer's weights to every policy actor as ``version``; returns seconds."""
        return self.sync.policy(self._for_actors(state_dict), version)

    def _for_actors(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``rollout.policy_dtype``: the floating weights in the actors' dtype (LoRA adapters
        stay float32 on both sides, wmrl.weights.lora)."""
        dt = self.policy_dtype
        if dt is None:
            return state
        return {k: v.to(dt) if v.is_floating_point() and not is_adapter_key(k) else v
                for k, v in state.items()}

    def sync_world_model(self, state_dict: dict[str, torch.Tensor], version: int,
                         reward_state_dict: dict[str, torch.Tensor] | None = None,
                         policy_weights: Weights | None = None) -> float:
        """New world-model weights to every env actor as ``version`` (PACE); seconds.
        ``policy_weights``: for a collocated actor restarted meanwhile (it lost its policy)."""
        def policy_state() -> dict[str, torch.Tensor]:
            if policy_weights is None:
                raise RuntimeError("a rollout actor holding the policy was restarted during "
                                   "a world-model sync given no policy_weights")
            return policy_weights()

        return self.sync.world_model(state_dict, version, reward_state_dict, policy_state)

    def world_model_versions(self) -> list[int]:
        """The world-model version every env actor holds (0: as built from the config)."""
        return self.sync.world_model_versions()
