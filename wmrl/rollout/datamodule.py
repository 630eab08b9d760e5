"""``RolloutDataModule``: a Lightning DataModule whose "dataset" is fresh on-policy rollouts.

Each ``next()`` on the train stream runs ``rollout_epochs`` episodes of every env on Ray
actors and returns one trajectory batch (see ``wmrl.rollout.engine``). Rollouts are made
lazily, when the trainer asks for the batch, so they always use the weights of the last
optimizer step (the GRPOModule pulls batches itself: no prefetch of stale rollouts). Only the
next step's env resets, which do not depend on the policy, are started ahead: as soon as a
batch is gathered they run on the env actors while the trainer updates
(``rollout.overlap_resets``; not for collocated actors on an accelerator, see ``start``).

Every trainer rank starts its own actors. Where they run (``wmrl.rollout.placement``): env
and policy actors ask Ray for ``env_resources`` / ``policy_resources`` and compute on the
card Ray assigned them; collocated actors run on their trainer rank's node and share its
card. Weights go to the policy actors through the Ray object store (``transport: cpu``) or
over a process group of the trainer rank and its policy actors that ``setup`` builds
(``gloo`` / ``device``: NCCL, RCCL, HCCL, MCCL).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterator

import lightning as L
import ray
import torch

from strategies import full_state_dict
from wmrl.config import ConfigError, to_container
from wmrl.interfaces import PolicyTrainer, TrajectoryBatch
from wmrl.rollout import placement as place
from wmrl.rollout.engine import (
    PLACEMENTS,
    RolloutPlan,
    RolloutTimeout,
    busy_breakdown,
    collect_rollouts,
    issue_resets,
    reset_seed,
)
from wmrl.rollout.sync_group import SyncGroup, free_port
from wmrl.rollout.weight_sync import WeightSender, push_weights
from wmrl.rollout.workers import RolloutActor

log = logging.getLogger(__name__)


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
        device: str = "auto",
        env_resources: dict | None = None,
        policy_resources: dict | None = None,
        compute_on_cpu: bool = False,
        ray_address: str | None = None,
        ray_num_cpus: int | None = None,
        actor_start_timeout_s: float = 600.0,
        step_timeout_s: float | None = 3600.0,
        max_actor_restarts: int = 3,
        overlap_resets: bool = True,
        weight_sync: dict | None = None,
        tracing: bool = False,
        seed: int = 0,
    ):
        super().__init__()
        self.policy_cfg = to_container(policy)
        self.env_cfg = to_container(env)
        # the rollout group owns the env sizes: an env config that says otherwise is refused
        self.env_sizes = dict(num_envs=num_envs // max(num_env_workers, 1),
                              group_size=group_size, chunk=chunk,
                              max_episode_steps=max_episode_steps)
        for key, value in self.env_sizes.items():
            if key in self.env_cfg and self.env_cfg[key] != value:
                per = " per env worker" if key == "num_envs" else ""
                raise ConfigError(
                    f"env.{key}={self.env_cfg[key]} conflicts with the rollout's "
                    f"{value}{per} (rollout.{key}): the rollout group sets env sizes; remove "
                    f"env.{key}")
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
        self.device = device
        self.env_resources = dict(to_container(env_resources) or {})
        self.policy_resources = dict(to_container(policy_resources) or {})
        place.check_roles(device, placement, {"env": self.env_resources,
                                              "policy": self.policy_resources})
        self.compute_on_cpu = compute_on_cpu  # test switch: resolve devices, compute on CPU
        self.ray_address = ray_address
        self.ray_num_cpus = ray_num_cpus
        self.actor_start_timeout_s = actor_start_timeout_s
        self.step_timeout_s = step_timeout_s
        self.max_actor_restarts = max_actor_restarts
        self.overlap_resets = overlap_resets  # asked for; start() decides where it is safe
        self.overlapping = False  # the next step's resets run during the update
        # (seed of the step, {(env actor, stage): obs ref}) of the resets started ahead; not
        # checkpointed: after a resume the first step resets itself, with the same seeds
        self._resets_ahead: tuple[int, dict] | None = None
        self.actor_restarts = 0  # actor deaths recovered from in this run
        self.synced_version: int | None = None  # the version every policy actor holds
        self._actor_names: dict[str, str] = {}  # Ray actor id -> env-0, policy-0, ...
        self._world_model: tuple | None = None  # (refs, version) of the last PACE push
        self.seed = seed
        self.rollout_step = 0  # batches made so far; seeds continue from it on resume
        self.plan: RolloutPlan | None = None
        sync = dict(to_container(weight_sync) or {})
        self.zero_copy_weights = bool(sync.pop("zero_copy", False))
        self.sender = WeightSender(**sync)
        self.tracing = tracing
        self._trace_events: list[dict] = []  # actors' events since pop_trace_events
        self._started_ray = False
        self.last_timing: dict[str, float] = {}
        self.sync_group: SyncGroup | None = None

    # ---- lifecycle -------------------------------------------------------------------
    @property
    def rollout_workers(self) -> list[Any]:
        """The actors that hold a policy copy (weight sync targets)."""
        return self.plan.policy_actors if self.plan else []

    def setup(self, stage: str | None = None) -> None:
        if self.plan is not None:
            return
        t = self.trainer
        if t is None:
            self.start()
        else:
            self.start(t.global_rank, t.world_size, t.strategy.root_device)

    def start(self, rank: int = 0, world_size: int = 1,
              trainer_device: torch.device | str = "cpu") -> None:
        """Start (or join) Ray and this trainer rank's actors, then the weight-sync group."""
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=self.ray_num_cpus, include_dashboard=False,
                         log_to_driver=False)
                self._started_ray = True
        # every trainer rank drives its own actors: give each different episodes
        self.seed += 7919 * rank
        self.trainer_device = torch.device(trainer_device)
        self.plan = self.build_plan(world_size)
        self._wait_for_actors()
        # Collocated actors on an accelerator move their env models off the card while the
        # trainer updates (RolloutActor.rest); a reset during the update would move them back
        # and hold the card beside the trainer's weights, optimizer state and activations. So
        # there the resets wait for the rollout; on the CPU nothing moves and they overlap.
        on_card = self.plan.collocated and any(
            r["compute_device"] != "cpu" for r in self.placement_report())
        self.overlapping = self.overlap_resets and not on_card
        if self.overlap_resets and on_card:
            log.info("rollout.overlap_resets: off for collocated actors on an accelerator "
                     "(the env models stay off the card during the update)")
        if self.sender.transport == "device" and self.plan.collocated:
            # the actors share the trainer's card: NCCL cannot pair two ranks on one card
            if self.trainer_device.type == "cuda":  # CUDA and ROCm
                self.sender.use_ipc(self.trainer_device)
            else:
                log.warning("rollout.weight_sync.transport=device: collocated actors share "
                            "the trainer's %s card and IPC is CUDA/ROCm only; using the Ray "
                            "object store", self.trainer_device.type)
                self.sender.use_store()
        elif self.sender.transport != "cpu":
            self._connect_sync_group()

    def _wait_for_actors(self) -> None:
        """Fail loudly (not hang) when Ray cannot place the actors."""
        try:
            ray.get([a.ready.remote() for a in self.plan.actors],
                    timeout=self.actor_start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"rollout actors did not start within rollout.actor_start_timeout_s="
                f"{self.actor_start_timeout_s}: the Ray cluster has "
                f"{ray.available_resources()} free of {ray.cluster_resources()}; other jobs "
                "may hold what they need.") from None

    def _options(self) -> dict[str, tuple[dict, int, str]]:
        """Ray options per role: config key -> (options, actors of this rank, role)."""
        cpus = self.worker_cpus
        if self.placement == "collocated":
            # share the trainer rank's card and node: request no card, pin to the node
            opts = place.actor_options(self.env_resources, cpus,
                                       node_id=ray.get_runtime_context().get_node_id(),
                                       shared_type=self.trainer_device.type)
            return {"rollout.env_resources": (opts, self.num_env_workers, "collocated")}
        return {
            "rollout.env_resources": (place.actor_options(self.env_resources, cpus),
                                      self.num_env_workers, "env"),
            "rollout.policy_resources": (place.actor_options(self.policy_resources, cpus),
                                         self.num_rollout_workers, "policy"),
        }

    def build_plan(self, world_size: int = 1) -> RolloutPlan:
        roles = self._options()
        place.check_cluster({key: place.request_of(opts, n) for key, (opts, n, _) in roles.items()},
                            ray.cluster_resources(), ranks=world_size)
        env = dict(self.env_cfg, **self.env_sizes)
        common = dict(stages=self.stages, num_threads=self.worker_threads, tracing=self.tracing,
                      device=self.device, compute_on_cpu=self.compute_on_cpu)
        policy = dict(policy=self.policy_cfg, zero_copy_weights=self.zero_copy_weights)
        actors: dict[str, list] = {}
        for opts, n, role in roles.values():
            # a dead actor process (OOM kill, lost node) is restarted by Ray in the same
            # placement, with the same arguments; next_batch re-syncs it and re-runs the step
            actor = ray.remote(RolloutActor).options(**opts, max_restarts=self.max_actor_restarts)
            kw = {"env": dict(env=env), "policy": policy,
                  "collocated": dict(env=env, **policy,
                                     shared_device=place.shared_card(self.trainer_device))}[role]
            actors[role] = [actor.remote(**kw, **common, name=f"{role}-{i}") for i in range(n)]
            self._actor_names.update({a._actor_id.hex(): f"{role}-{i}"
                                      for i, a in enumerate(actors[role])})
        if self.placement == "collocated":
            both = actors["collocated"]
            return RolloutPlan(both, both, self.stages, collocated=True)
        return RolloutPlan(actors["env"], actors["policy"], self.stages)

    def _connect_sync_group(self) -> None:
        """The trainer rank (group rank 0) and its policy actors form the weight-sync group:
        gloo, plus the device's collective library for ``transport: device``."""
        host = ray.util.get_node_ip_address()
        port = free_port()
        workers = self.rollout_workers
        size = 1 + len(workers)
        timeout = self.actor_start_timeout_s
        joined = [a.join_sync_group.remote(host, port, i + 1, size, timeout)
                  for i, a in enumerate(workers)]
        device = self.trainer_device if self.sender.transport == "device" else "cpu"
        self.sync_group = SyncGroup(host, port, 0, size, device, timeout)
        ray.get(joined, timeout=timeout)
        self.sender.use_group(self.sync_group, device)

    def placement_report(self) -> list[dict]:
        """Every actor's node, Ray accelerator ids and resolved device."""
        return ray.get([a.placement_info.remote() for a in self.plan.actors])

    def teardown(self, stage: str | None = None) -> None:
        for a in self.plan.actors if self.plan else []:
            ray.kill(a)
        self.plan = None
        self.sync_group = None
        self._resets_ahead = None
        self._world_model = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def state_dict(self) -> dict[str, Any]:
        return {"rollout_step": self.rollout_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rollout_step = int(state_dict["rollout_step"])
        self._resets_ahead = None  # made for another step

    # ---- data ------------------------------------------------------------------------
    def train_dataloader(self) -> Iterator[TrajectoryBatch]:
        return _RolloutStream(self)

    def _step_seed(self, step: int) -> int:
        return self.seed * 100_003 + step

    def next_batch(self) -> TrajectoryBatch:
        start = time.time()
        seed = self._step_seed(self.rollout_step)
        ahead, self._resets_ahead = self._resets_ahead, None
        failures = 0
        while True:
            try:
                resets = self._held_resets(seed, ahead) if ahead else None
                batch = collect_rollouts(self.plan, self.num_chunks, self.temperature,
                                         self.rollout_epochs, seed, self.step_timeout_s,
                                         resets=resets)
                if self.plan.collocated:  # free the device for the trainer's update
                    ray.get([a.rest.remote() for a in self.plan.actors],
                            timeout=self.step_timeout_s)
                break
            except ray.exceptions.RayActorError as err:
                ahead = None  # a restarted actor lost the resets made ahead: reset again
                failures += 1
                if failures > self.max_actor_restarts:
                    raise RuntimeError(
                        f"rollout step {self.rollout_step}: a rollout actor died {failures} "
                        f"times (rollout.max_actor_restarts={self.max_actor_restarts}); last: "
                        f"{self._describe(err)}") from None
                self._recover(err)  # then the same seed makes the same batch
        end = time.time()
        self.rollout_step += 1
        records = ray.get([a.pop_step_record.remote() for a in self.plan.actors],
                          timeout=self.step_timeout_s)
        busy = [iv for intervals, _, _ in records for iv in intervals]
        self._trace_events += [ev for _, events, _ in records for ev in events]
        # env time before the step began: the resets that ran during the last update
        ahead_s = sum(min(t1, start) - t0 for role, t0, t1 in busy if role == "env" and t0 < start)
        self.last_timing = {"rollout_s": end - start, **busy_breakdown(busy, start, end),
                            "reward_s": sum(r for _, _, r in records), "reset_ahead_s": ahead_s}
        if self.overlapping:  # the next step's resets run while the trainer updates
            next_seed = self._step_seed(self.rollout_step)
            self._resets_ahead = (next_seed, issue_resets(self.plan, next_seed))
        return batch.to_torch()

    def _held_resets(self, seed: int, ahead: tuple[int, dict]) -> dict | None:
        """The resets started ahead for step ``seed`` if every env actor still holds them
        (waits for them to finish); None if they were made for another step or an actor
        was restarted since (Ray's new process holds no reset). A dead actor raises."""
        ahead_seed, refs = ahead
        if ahead_seed != seed:
            return None
        checks = [self.plan.env_actors[j].holds_reset.remote(s, reset_seed(seed, 0, j, s))
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

    def _await_restart(self, err: Exception, during: str) -> None:
        """An actor died: wait for Ray to restart it (same role, config and placement) and
        re-form the weight-sync group it was in."""
        self.actor_restarts += 1
        log.warning("%s during %s; waiting for Ray to restart it (%d so far)",
                    self._describe(err), during, self.actor_restarts)
        deadline = time.monotonic() + self.actor_start_timeout_s
        while True:  # "unavailable" while Ray restarts it; "died" once it gave up
            try:
                ray.get([a.ready.remote() for a in self.plan.actors],
                        timeout=max(1.0, deadline - time.monotonic()))
                break
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self._describe(err)} and was not back within rollout."
                        f"actor_start_timeout_s={self.actor_start_timeout_s}") from None
                time.sleep(0.2)
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(
                    f"{self._describe(err)} and was not back within rollout."
                    f"actor_start_timeout_s={self.actor_start_timeout_s}") from None
            except ray.exceptions.RayActorError as dead:
                raise RuntimeError(f"{self._describe(dead)} and could not be restarted "
                                   f"(first: {self._describe(err)})") from None
        if self.sender.transport not in ("cpu", "ipc"):
            self._connect_sync_group()  # the new process is in no group yet
        self.sender.reset()  # a restarted actor holds no delta base: the next sync is full
        if self._world_model is not None:  # PACE: the new process built the original model
            state_ref, reward_ref, version = self._world_model
            ray.get([a.load_world_model.remote(state_ref, version, reward_ref)
                     for a in self.plan.env_actors], timeout=self.step_timeout_s)

    def _describe(self, err: Exception) -> str:
        """Which actor died and its error's first line."""
        actor_id = getattr(err, "actor_id", None)
        name = self._actor_names.get(actor_id.hex() if hasattr(actor_id, "hex") else
                                     str(actor_id), "a rollout actor")
        return f"actor {name} died ({_first_line(err)})"

    def _recover(self, err: Exception) -> None:
        """After an actor died mid-rollout: restart it and bring every policy actor back to
        the weight version the rollout was made with (the trainer's current weights: the
        update comes after the rollout)."""
        self._await_restart(err, f"rollout step {self.rollout_step}")
        if self.synced_version is None:
            return  # nothing synced yet: on_train_start's sync comes next
        module = self.trainer.lightning_module if self.trainer is not None else None
        if not isinstance(module, PolicyTrainer):
            raise RuntimeError("a rollout actor was restarted but no trainer module holds the "
                               "weights to re-sync it") from None
        if module.trainer.world_size > 1 and any(hasattr(p, "full_tensor")
                                                 for p in module.policy.parameters()):
            raise RuntimeError(
                "a rollout actor was restarted, but re-syncing sharded (FSDP) weights needs "
                "every trainer rank: resume from <run_dir>/checkpoints/last.ckpt") from None
        self.sync_weights(full_state_dict(module.policy), self.synced_version)

    # ---- weight sync -----------------------------------------------------------------
    def sync_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Send the trainer's weights to every policy actor as ``version``; returns seconds."""
        t0 = time.perf_counter()
        what = f"weight sync v{version}"
        self._retry_on_actor_death(what, lambda: self._push(state_dict, version),
                                   lambda err: self._await_restart(err, what))
        self.synced_version = version
        return time.perf_counter() - t0

    def _retry_on_actor_death(self, what: str, call: Any, recover: Any) -> Any:
        """``call()``; when an actor died, ``recover(err)`` and call again, at most
        ``max_actor_restarts`` times, then an error naming the actor."""
        for failures in range(self.max_actor_restarts + 1):
            try:
                return call()
            except ray.exceptions.RayActorError as err:
                if failures == self.max_actor_restarts:
                    raise RuntimeError(
                        f"{what}: a rollout actor died {failures + 1} times (rollout."
                        f"max_actor_restarts={self.max_actor_restarts}); last: "
                        f"{self._describe(err)}") from None
                recover(err)

    def _push(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        try:
            push_weights(self.sender, state_dict, version, self.rollout_workers,
                         timeout_s=self.step_timeout_s)
        except ray.exceptions.RayActorError:
            raise
        except (ray.exceptions.RayTaskError, RuntimeError) as err:
            if self.sender.transport != "ipc":
                raise
            # e.g. a container without the IPC permission: the object store always works
            log.warning("CUDA IPC weight sync failed (%s); falling back to the Ray object "
                        "store", str(err).splitlines()[0])
            self.sender.use_store()
            push_weights(self.sender, state_dict, version, self.rollout_workers,
                         timeout_s=self.step_timeout_s)

    # ---- world-model sync (PACE: callbacks/pace.py) ----------------------------------
    def sync_world_model(self, state_dict: dict[str, torch.Tensor], version: int,
                         reward_state_dict: dict[str, torch.Tensor] | None = None) -> float:
        """New world-model weights (transformer + action modules, optionally the reward's)
        to every env actor as ``version``: one ``ray.put`` each, the refs to all actors
        (``RolloutActor.load_world_model``); every actor must report ``version`` back.
        Returns seconds. A dead actor is restarted (and its policy re-synced) and the push
        repeated. Only the transformer and action modules change, not the VAE, so resets
        already started ahead (their anchor frame and encoder state) stay valid."""
        t0 = time.perf_counter()
        state_ref = ray.put(state_dict)
        reward_ref = None if reward_state_dict is None else ray.put(reward_state_dict)
        got = self._retry_on_actor_death(  # a restarted actor gets its policy back first
            f"world-model sync v{version}",
            lambda: ray.get([a.load_world_model.remote(state_ref, version, reward_ref)
                             for a in self.plan.env_actors], timeout=self.step_timeout_s),
            self._recover)
        if got != [version] * len(self.plan.env_actors):
            raise RuntimeError(f"world-model sync v{version}: env actors report {got}")
        self._world_model = (state_ref, reward_ref, version)  # for a restarted env actor
        return time.perf_counter() - t0

    def world_model_versions(self) -> list[int]:
        """The world-model version every env actor holds (0: as built from the config)."""
        return ray.get([a.get_world_model_version.remote() for a in self.plan.env_actors],
                       timeout=self.step_timeout_s)


def _first_line(err: BaseException) -> str:
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


class _RolloutStream:
    """Endless iterable of rollout batches (Lightning stops it via trainer.max_steps)."""

    def __init__(self, dm: RolloutDataModule):
        self.dm = dm

    def __iter__(self) -> "_RolloutStream":
        return self

    def __next__(self) -> TrajectoryBatch:
        return self.dm.next_batch()
