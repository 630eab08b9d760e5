"""``ActorPool``: one trainer rank's rollout actors on Ray: start, placement, restart.

Where the actors run (``wmrl.rollout.placement``): env and policy actors ask Ray for
``env_resources`` / ``policy_resources`` and compute on the card Ray assigned them;
collocated actors run on their trainer rank's node and share its card. A dead actor process
(OOM kill, lost node) is restarted by Ray in the same placement with the same arguments
(``max_actor_restarts``); ``await_restart`` waits for it. What a restarted actor lost (its
weights, its sync-group membership) is put back by ``wmrl.rollout.actor_sync.ActorSync``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from typing import Any, Callable

import ray
import torch

from wmrl.rollout import placement as place
from wmrl.rollout.engine import ActorLayout
from wmrl.rollout.workers import RolloutActor

log = logging.getLogger(__name__)


def first_line(err: BaseException) -> str:
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


class ActorPool:
    """The env and policy actors of one trainer rank (``ActorLayout``)."""

    def __init__(self, policy: dict, env: dict, placement: str, stages: int,
                 num_env_workers: int, num_rollout_workers: int, worker_cpus: float,
                 worker_threads: int | None, device: str, env_resources: dict,
                 policy_resources: dict, compute_on_cpu: bool, ray_address: str | None,
                 ray_num_cpus: int | None, actor_start_timeout_s: float,
                 max_actor_restarts: int, tracing: bool, zero_copy_weights: bool):
        self.policy_cfg, self.env_cfg = policy, env
        self.placement, self.stages = placement, stages
        self.num_env_workers, self.num_rollout_workers = num_env_workers, num_rollout_workers
        self.worker_cpus, self.worker_threads = worker_cpus, worker_threads
        self.device = device
        self.env_resources, self.policy_resources = env_resources, policy_resources
        self.compute_on_cpu = compute_on_cpu  # test switch: resolve devices, compute on CPU
        self.ray_address, self.ray_num_cpus = ray_address, ray_num_cpus
        self.actor_start_timeout_s = actor_start_timeout_s
        self.max_actor_restarts = max_actor_restarts
        self.tracing, self.zero_copy_weights = tracing, zero_copy_weights
        self.layout: ActorLayout | None = None
        self.trainer_device = torch.device("cpu")
        self.restarts = 0  # actor deaths recovered from in this run
        self._names: dict[str, str] = {}  # Ray actor id -> env-0, policy-0, ...
        self._started_ray = False

    # ---- start / stop ----------------------------------------------------------------
    def start(self, world_size: int = 1, trainer_device: torch.device | str = "cpu") -> None:
        """Start (or join) Ray, then this rank's actors; wait until every one is up."""
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address, log_to_driver=False)
            else:
                ray.init(num_cpus=self.ray_num_cpus, include_dashboard=False,
                         log_to_driver=False)
                self._started_ray = True
        self.trainer_device = torch.device(trainer_device)
        self.layout = self._build_layout(world_size)
        try:  # fail loudly, not hang, when Ray cannot place the actors
            ray.get([a.ready.remote() for a in self.layout.actors],
                    timeout=self.actor_start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            disk = shutil.disk_usage(tempfile.gettempdir())  # where a local Ray keeps its session
            msg = (f"rollout actors did not start within rollout.actor_start_timeout_s="
                   f"{self.actor_start_timeout_s}: the Ray cluster has "
                   f"{ray.available_resources()} free of {ray.cluster_resources()}; other jobs "
                   f"may hold what they need. {tempfile.gettempdir()} has "
                   f"{disk.free / 2**30:.1f} GiB free of {disk.total / 2**30:.0f} (Ray refuses "
                   "new objects above 95% used).")
            self.stop()  # the pending actors would take the resources once they free up
            raise RuntimeError(msg) from None

    def stop(self) -> None:
        for a in self.layout.actors if self.layout else []:
            ray.kill(a)
        self.layout = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

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

    def _build_layout(self, world_size: int) -> ActorLayout:
        roles = self._options()
        place.check_cluster({key: place.request_of(opts, n) for key, (opts, n, _) in roles.items()},
                            ray.cluster_resources(), ranks=world_size)
        common = dict(stages=self.stages, num_threads=self.worker_threads, tracing=self.tracing,
                      device=self.device, compute_on_cpu=self.compute_on_cpu)
        policy = dict(policy=self.policy_cfg, zero_copy_weights=self.zero_copy_weights)
        actors: dict[str, list] = {}
        for opts, n, role in roles.values():
            actor = ray.remote(RolloutActor).options(**opts, max_restarts=self.max_actor_restarts)
            kw = {"env": dict(env=self.env_cfg), "policy": policy,
                  "collocated": dict(env=self.env_cfg, **policy,
                                     shared_device=place.shared_card(self.trainer_device))}[role]
            actors[role] = [actor.remote(**kw, **common, name=f"{role}-{i}") for i in range(n)]
            self._names.update({a._actor_id.hex(): f"{role}-{i}"
                                for i, a in enumerate(actors[role])})
        if self.placement == "collocated":
            both = actors["collocated"]
            return ActorLayout(both, both, self.stages, collocated=True)
        return ActorLayout(actors["env"], actors["policy"], self.stages)

    # ---- what runs where -------------------------------------------------------------
    @property
    def policy_actors(self) -> list[Any]:
        """The actors that hold a policy copy (weight sync targets)."""
        return self.layout.policy_actors if self.layout else []

    @property
    def env_actors(self) -> list[Any]:
        return self.layout.env_actors if self.layout else []

    def placement_report(self) -> list[dict]:
        """Every actor's node, Ray accelerator ids and resolved device."""
        return ray.get([a.placement_info.remote() for a in self.layout.actors])

    def on_trainer_card(self) -> bool:
        """Collocated actors computing on an accelerator: they share the trainer's card."""
        return self.layout.collocated and any(
            r["compute_device"] != "cpu" for r in self.placement_report())

    # ---- actor deaths ----------------------------------------------------------------
    def retry(self, what: str, call: Callable[[], Any],
              recover: Callable[[Exception], None]) -> Any:
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
                        f"{self.describe(err)}") from None
                recover(err)

    def await_restart(self, err: Exception, during: str) -> None:
        """An actor died: wait until Ray has restarted it (same role, config, placement)."""
        self.restarts += 1
        log.warning("%s during %s; waiting for Ray to restart it (%d so far)",
                    self.describe(err), during, self.restarts)
        deadline = time.monotonic() + self.actor_start_timeout_s
        while True:  # "unavailable" while Ray restarts it; "died" once it gave up
            try:
                ray.get([a.ready.remote() for a in self.layout.actors],
                        timeout=max(1.0, deadline - time.monotonic()))
                return
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.describe(err)} and was not back within rollout."
                        f"actor_start_timeout_s={self.actor_start_timeout_s}") from None
                time.sleep(0.2)
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(
                    f"{self.describe(err)} and was not back within rollout."
                    f"actor_start_timeout_s={self.actor_start_timeout_s}") from None
            except ray.exceptions.RayActorError as dead:
                raise RuntimeError(f"{self.describe(dead)} and could not be restarted "
                                   f"(first: {self.describe(err)})") from None

    def describe(self, err: Exception) -> str:
        """Which actor died and its error's first line."""
        actor_id = getattr(err, "actor_id", None)
        name = self._names.get(actor_id.hex() if hasattr(actor_id, "hex") else str(actor_id),
                               "a rollout actor")
        return f"actor {name} died ({first_line(err)})"
