"""``ActorSync``: the trainer's weights to one rank's rollout actors, versioned.

* the policy to every policy actor (``policy``): through the Ray object store
  (``transport: cpu``), CUDA IPC for collocated actors on the trainer's card, or over a
  process group of the trainer rank and its policy actors (``gloo`` / ``device``: NCCL,
  RCCL, HCCL, MCCL) that ``connect`` builds;
* the world model (transformer + action modules, optionally the reward) to every env actor
  (``world_model``, PACE).

A push during which an actor died waits for Ray's restart (``ActorPool.await_restart``),
puts back what the new process lost (``restore``: sync-group membership, the delta base,
the last world model) and is repeated.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray
import torch

from wmrl.rollout.actor_pool import ActorPool, first_line
from wmrl.rollout.sync_group import SyncGroup, free_port
from wmrl.rollout.weight_sync.sender import WeightSender, push_weights

log = logging.getLogger(__name__)


class ActorSync:
    def __init__(self, pool: ActorPool, timeout_s: float | None, **sender: Any):
        self.pool = pool
        self.timeout_s = timeout_s
        self.sender = WeightSender(**sender)
        self.group: SyncGroup | None = None
        self.policy_version: int | None = None  # the version every policy actor holds
        self._world_model: tuple | None = None  # (state ref, reward ref, version) last pushed

    def connect(self) -> None:
        """Choose the transport's path for this pool (after ``pool.start``)."""
        device = self.pool.trainer_device
        if self.sender.transport == "device" and self.pool.layout.collocated:
            # the actors share the trainer's card: NCCL cannot pair two ranks on one card
            if device.type == "cuda":  # CUDA and ROCm
                self.sender.use_ipc(device)
            else:
                log.warning("rollout.weight_sync.transport=device: collocated actors share "
                            "the trainer's %s card and IPC is CUDA/ROCm only; using the Ray "
                            "object store", device.type)
                self.sender.use_store()
        elif self.sender.transport != "cpu":
            self._join_group()

    def _join_group(self) -> None:
        """The trainer rank (group rank 0) and its policy actors: gloo, plus the device's
        collective library for ``transport: device``."""
        host = ray.util.get_node_ip_address()
        port = free_port()
        workers = self.pool.policy_actors
        size = 1 + len(workers)
        timeout = self.pool.actor_start_timeout_s
        joined = [a.join_sync_group.remote(host, port, i + 1, size, timeout)
                  for i, a in enumerate(workers)]
        device = self.pool.trainer_device if self.sender.transport == "device" else "cpu"
        self.group = SyncGroup(host, port, 0, size, device, timeout)
        ray.get(joined, timeout=timeout)
        self.sender.use_group(self.group, device)

    def close(self) -> None:
        self.group = None
        self._world_model = None

    # ---- after an actor restart ------------------------------------------------------
    def restore(self, err: Exception, during: str) -> None:
        """Wait for the restarted actor, then give it what the new process lacks (not the
        policy weights: see ``policy``)."""
        self.pool.await_restart(err, during)
        if self.sender.transport not in ("cpu", "ipc"):
            self._join_group()  # the new process is in no group yet
        self.sender.reset()  # a restarted actor holds no delta base: the next push is full
        if self._world_model is not None:  # PACE: the new process built the original model
            state_ref, reward_ref, version = self._world_model
            ray.get([a.load_world_model.remote(state_ref, version, reward_ref)
                     for a in self.pool.env_actors], timeout=self.timeout_s)

    # ---- pushes ----------------------------------------------------------------------
    def policy(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Send the trainer's policy weights to every policy actor as ``version``; seconds."""
        t0 = time.perf_counter()
        what = f"weight sync v{version}"
        self.pool.retry(what, lambda: self._push(state_dict, version),
                        lambda err: self.restore(err, what))
        self.policy_version = version
        return time.perf_counter() - t0

    def _push(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        try:
            push_weights(self.sender, state_dict, version, self.pool.policy_actors,
                         timeout_s=self.timeout_s)
        except ray.exceptions.RayActorError:
            raise
        except (ray.exceptions.RayTaskError, RuntimeError) as err:
            if self.sender.transport != "ipc":
                raise
            # e.g. a container without the IPC permission: the object store always works
            log.warning("CUDA IPC weight sync failed (%s); falling back to the Ray object "
                        "store", first_line(err))
            self.sender.use_store()
            push_weights(self.sender, state_dict, version, self.pool.policy_actors,
                         timeout_s=self.timeout_s)

    def world_model(self, state_dict: dict[str, torch.Tensor], version: int,
                    reward_state_dict: dict[str, torch.Tensor] | None,
                    policy_state: Any) -> float:
        """New world-model weights (transformer + action modules, optionally the reward's)
        to every env actor as ``version``: one ``ray.put`` each, the refs to all actors
        (``RolloutActor.load_world_model``); every actor must report ``version`` back.
        Returns seconds. ``policy_state()``: the policy weights of the synced version, for a
        collocated actor restarted meanwhile. Only the transformer and action modules
        change, not the VAE, so resets already started ahead stay valid."""
        t0 = time.perf_counter()
        state_ref = ray.put(state_dict)
        reward_ref = None if reward_state_dict is None else ray.put(reward_state_dict)
        what = f"world-model sync v{version}"

        def recover(err: Exception) -> None:
            self.restore(err, what)
            if self.policy_version is not None:
                self.policy(policy_state(), self.policy_version)

        got = self.pool.retry(
            what, lambda: ray.get([a.load_world_model.remote(state_ref, version, reward_ref)
                                   for a in self.pool.env_actors], timeout=self.timeout_s),
            recover)
        if got != [version] * len(self.pool.env_actors):
            raise RuntimeError(f"world-model sync v{version}: env actors report {got}")
        self._world_model = (state_ref, reward_ref, version)  # for a restarted env actor
        return time.perf_counter() - t0

    def world_model_versions(self) -> list[int]:
        """The world-model version every env actor holds (0: as built from the config)."""
        return ray.get([a.get_world_model_version.remote() for a in self.pool.env_actors],
                       timeout=self.timeout_s)
