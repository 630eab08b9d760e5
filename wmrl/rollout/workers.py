"""``RolloutActor``: the process that holds a rollout role - the policy (sampling), the env
(world model + reward), or both (collocated placement). Plain class, usable in-process;
the DataModule wraps it with ``ray.remote``.

Its device comes from what the scheduler assigned (``wmrl.rollout.placement``): the
accelerator ids Ray gave the actor, or - collocated - the trainer rank's card, passed in.
Every ``device`` key of the env config (world model, reward) is set to it.

Envs are split into ``stages`` sub-batches (whole groups each) so that, with separate env
and policy actors, the policy samples for one stage while the world model steps another
(hybrid placement). Every mode uses the same stages and per-call seeds, so all placements
produce the same trajectories for the same seed.

Separate env and policy actors exchange numpy arrays (Ray moves them through its
shared-memory object store). When one actor holds both roles, the env's observation tensor
goes to the policy as it is, on the device: no host round trip.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from strategies import devices
from wmrl.build import build
from wmrl.measure.tracing import Tracer
from wmrl.rollout.placement import resolve_device
from wmrl.rollout.sync_group import SyncGroup
from wmrl.rollout.weight_sync.receiver import WeightReceiver
from wmrl.rollout.weight_sync.types import SyncPayload
from wmrl.weights.lora import synced_entries

MAX_REDRAWS = 3  # re-draws of a sample with non-finite log-probs before giving up


def to_numpy_obs(obs: dict) -> dict:
    image = obs["image"]
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    return {"image": np.ascontiguousarray(image), "task": list(obs["task"])}


def to_torch_obs(obs: dict, device: torch.device | str = "cpu") -> dict:
    image = obs["image"]
    if isinstance(image, np.ndarray):
        image = torch.from_numpy(np.ascontiguousarray(image))
    return {"image": image.to(device), "task": list(obs["task"])}


def with_device(spec: Any, device: str) -> Any:
    """A copy of a config whose every ``device`` key (env, world model, reward) is ``device``."""
    if isinstance(spec, dict):
        return {k: device if k == "device" else with_device(v, device) for k, v in spec.items()}
    if isinstance(spec, list):
        return [with_device(v, device) for v in spec]
    return spec


def _keys(spec: Any):
    """Every key of a nested config."""
    if isinstance(spec, dict):
        for k, v in spec.items():
            yield k
            yield from _keys(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _keys(v)


def assigned_accelerator_ids() -> dict[str, list[str]]:
    """The accelerator ids Ray assigned to this process ({} outside Ray)."""
    import ray

    if not ray.is_initialized():
        return {}
    return dict(ray.get_runtime_context().get_accelerator_ids())


class RolloutActor:
    def __init__(
        self,
        policy: Any = None,
        env: Any = None,
        stages: int = 1,
        num_threads: int | None = None,
        device: str = "auto",
        shared_device: str | None = None,
        compute_on_cpu: bool = False,
        offload_idle: bool = True,
        zero_copy_weights: bool = False,
        name: str = "rollout",
        tracing: bool = False,
    ):
        """``device``: rollout.device (auto | cpu | cuda | npu | musa | xpu); ``shared_device``:
        the trainer's card (collocated), e.g. ``cuda:3``; ``compute_on_cpu``: resolve the
        device as on an accelerator node but compute on the CPU (tests on fake resources)."""
        Tracer.configure(enabled=tracing, process_name=name)
        if num_threads:
            torch.set_num_threads(num_threads)
        self.name = name
        self.accelerator_ids = {k: [str(i) for i in v]
                                for k, v in assigned_accelerator_ids().items() if v}
        self.resolved_device = resolve_device(device, self.accelerator_ids, shared_device,
                                              role="env" if env is not None else "policy")
        self.device = torch.device("cpu" if compute_on_cpu else self.resolved_device)
        if self.device.type != "cpu":
            devices.import_vendor(self.device.type)
            torch.accelerator.set_device_index(self.device.index)  # collectives, caches
        # roles take turns on one device: move the idle one off it (no-op on CPU)
        self.offload_idle = offload_idle and policy is not None and env is not None \
            and self.device.type != "cpu"
        self.shares_obs = policy is not None and env is not None
        self.policy = build(policy).eval() if policy is not None else None
        if self.policy is not None and not self.offload_idle:  # else: on its first turn
            self.policy.to(self.device)
        self.envs: list[Any] = []
        # an env whose config has a device key computes there; others (simulators) get host
        # tensors from a collocated policy
        self.env_on_device = env is not None and "device" in set(_keys(env))
        if env is not None:
            env = with_device(dict(env), str(self.device))
            if env["num_envs"] % stages:
                raise ValueError(f"num_envs={env['num_envs']} does not split into {stages} stages")
            env["num_envs"] //= stages
            self.envs = [build(env) for _ in range(stages)]
        self.generator = torch.Generator(device=self.device)
        # version -1 until the first sync; zero-copy aliases the object store (CPU only)
        # LoRA: the frozen base is built here from the same spec; syncs carry the adapters
        self.weights = WeightReceiver(
            self.policy, zero_copy=zero_copy_weights and self.device.type == "cpu",
            keep=synced_entries(self.policy)) if self.policy else None
        self.last_obs: dict[int, dict] = {}  # collocated: the env's obs for the policy
        self.last_actions: dict[int, torch.Tensor] = {}  # and the policy's actions for the env
        self.reset_seeds: dict[int, int] = {}  # stage -> seed of its reset, until it steps
        self.world_model_version = 0  # PACE pushes (load_world_model); 0: as built
        self.busy: list[tuple[str, float, float]] = []  # (role, start, end) wall clock
        self.reward_s = 0.0  # reward-model time inside env steps (envs that report it)
        self.sync_group: SyncGroup | None = None
        # taking turns: start with nothing on the device (the trainer's setup comes next)
        self.active_role: str | None = "env"
        self._switch_to(None)

    # ---- roles -------------------------------------------------------------------------
    def _switch_to(self, role: str | None) -> None:
        """Collocated on an accelerator: only ``role``'s models stay on the device (None:
        neither, while the trainer updates)."""
        if not self.offload_idle or role == self.active_role:
            return
        t0 = time.time()
        env_model = [e for e in self.envs if hasattr(e, "offload")]
        if role != "env":
            for e in env_model:
                e.offload()
        if role != "policy":
            self.policy.to("cpu")
        if role == "policy":
            self.policy.to(self.device)
        elif role == "env":
            for e in env_model:
                e.onload()
        self.active_role = role
        self.busy.append(("offload", t0, time.time()))

    def rest(self) -> None:
        """End of a rollout: free the device for the trainer's update."""
        self._switch_to(None)

    def memory_stats(self) -> dict[str, int]:
        """Device memory of this process: now, and the peak since the last call ({} on CPU)."""
        if self.device.type == "cpu":
            return {}
        mod = getattr(torch, self.device.type)
        out = {"allocated_bytes": int(mod.memory_allocated(self.device)),
               "peak_bytes": int(mod.max_memory_allocated(self.device))}
        mod.reset_peak_memory_stats(self.device)
        return out

    def placement_info(self) -> dict:
        """Where this actor runs: Ray's node and accelerator ids, the device it resolved."""
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        return {"name": self.name, "node_id": node, "accelerator_ids": self.accelerator_ids,
                "device": self.resolved_device, "compute_device": str(self.device),
                "roles": [r for r, held in (("env", self.envs), ("policy", self.policy))
                          if held]}

    def reset(self, stage: int, seed: int) -> dict:
        t0 = time.time()
        self._switch_to("env")
        with Tracer.trace_span("env.reset", stage=stage):
            obs = self.envs[stage].reset(seed=seed)
        self.reset_seeds[stage] = seed
        self.busy.append(("env", t0, time.time()))
        return self._hand_over(stage, obs)

    def _hand_over(self, stage: int, obs: dict) -> dict | None:
        """Keep the observation for this actor's policy as the env made it (a device tensor),
        or return it as numpy for another actor's."""
        if self.shares_obs:
            self.last_obs[stage] = obs
            return None
        return to_numpy_obs(obs)

    def chunk_step(self, stage: int, actions: np.ndarray | None) -> tuple[dict | None, dict]:
        """-> (next obs, step record: [B, C] rewards/terminations/truncations, success [B]).
        ``actions=None``: the ones this actor's own policy sampled last (collocated)."""
        t0 = time.time()
        self._switch_to("env")
        env = self.envs[stage]
        self.reset_seeds.pop(stage, None)
        actions = self.last_actions.pop(stage) if actions is None \
            else torch.from_numpy(np.asarray(actions))
        reward_before = getattr(env, "timings", {}).get("reward", 0.0)
        with Tracer.trace_span("env.chunk_step", stage=stage):
            obs, rewards, terms, truncs, info = env.chunk_step(actions)
        self.reward_s += getattr(env, "timings", {}).get("reward", 0.0) - reward_before
        record = {
            "rewards": torch.as_tensor(rewards, dtype=torch.float32).cpu().numpy(),
            "terminations": torch.as_tensor(terms).bool().cpu().numpy(),
            "truncations": torch.as_tensor(truncs).bool().cpu().numpy(),
            "success": torch.as_tensor(info["success"]).bool().cpu().numpy(),
        }
        if "resample_success" in info:  # the env's resample check (a signal of exploitation)
            record["resample_success"] = torch.as_tensor(info["resample_success"]).bool().cpu().numpy()
        self.busy.append(("env", t0, time.time()))
        return self._hand_over(stage, obs), record

    @torch.no_grad()
    def sample(self, stage: int, obs: dict | None, temperature: float,
               seed: int) -> tuple[np.ndarray, dict]:
        """-> (actions [B, C, D] for the env, record for the trainer). ``obs=None``: the
        observation this actor's own env produced last (collocated placement)."""
        t0 = time.time()
        self._switch_to("policy")
        obs = self.last_obs[stage] if obs is None else obs
        self.generator.manual_seed(seed)
        with self.weights.reading() as version, Tracer.trace_span("policy.sample", stage=stage):
            # (holding the weights: no sync lands mid-sample)
            out = self._finite_sample(to_torch_obs(obs, self.device), temperature, version)
        record = {
            "image": to_numpy_obs(obs)["image"],  # for the trainer: device -> host once
            "task": list(obs["task"]),
            "tokens": out.tokens.cpu().numpy(),
            "logprobs": out.logprobs.float().cpu().numpy(),
            "version": version,
        }
        self.busy.append(("policy", t0, time.time()))
        if self.shares_obs:  # the actions stay here, on the device, for this actor's env
            actions = out.actions.float()
            self.last_actions[stage] = actions if self.env_on_device else actions.cpu()
            return None, record
        return out.actions.float().cpu().numpy(), record

    def _finite_sample(self, obs: dict, temperature: float, version: int) -> Any:
        """``policy.sample`` whose log-probs are all finite: a non-finite draw (a rare
        overflow) is re-drawn - the generator has advanced - up to ``MAX_REDRAWS`` times;
        one host sync per draw."""
        for _ in range(1 + MAX_REDRAWS):
            out = self.policy.sample(obs, temperature, self.generator)
            if torch.isfinite(out.logprobs).all():
                return out
        raise RuntimeError(
            f"{self.name}: policy version {version} sampled non-finite log-probs "
            f"{1 + MAX_REDRAWS} times in a row: the policy's logits are NaN/Inf (check the "
            f"synced weights / the checkpoint)")

    # ---- weights -----------------------------------------------------------------------
    def join_sync_group(self, host: str, port: int, rank: int, size: int,
                        timeout_s: float) -> int:
        """Join the trainer rank's weight-sync group (called while the trainer joins too)."""
        self.sync_group = SyncGroup(host, port, rank, size, self.device, timeout_s)
        self.weights.group = self.sync_group
        return rank

    def apply_weights(self, payload: SyncPayload) -> int:
        """Bucketed, versioned sync (``wmrl.rollout.weight_sync``); returns the new version."""
        with Tracer.trace_span("policy.apply_weights", version=payload.version):
            return self.weights.apply(payload)

    def ready(self) -> bool:
        return True

    def holds_reset(self, stage: int, seed: int) -> bool:
        """Whether env ``stage`` was reset with ``seed`` in this process and not stepped since
        (False in a process Ray restarted: a reset issued ahead was lost with the old one)."""
        return self.reset_seeds.get(stage) == seed

    def get_version(self) -> int:
        return self.weights.version

    def get_state(self) -> dict[str, np.ndarray]:
        """The policy's weights (bf16 ones as float32, which numpy holds exactly)."""
        return {k: (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
                for k, v in self.policy.state_dict().items()}

    def pop_step_record(self) -> tuple[list[tuple[str, float, float]], list[dict], float]:
        """Once per step: busy intervals (role, start, end), this process's trace events and
        the reward model's seconds."""
        busy, self.busy = self.busy, []
        reward_s, self.reward_s = self.reward_s, 0.0
        return busy, Tracer.flush(), reward_s

    # ---- world-model weights (PACE: wmrl/pace/round.py) ------------------------------
    def load_world_model(self, state_dict: Any, version: int,
                         reward_state_dict: Any = None) -> int:
        """New world-model (and optionally reward) weights into every env of this actor
        (``WanWorldModelEnv.load_world_model_weights``); returns the version they all hold.
        The DataModule passes one ``ray.put`` ref to all actors; Ray resolves a top-level ref
        argument to the dict before the call."""
        if not self.envs or not all(hasattr(e, "load_world_model_weights") for e in self.envs):
            kinds = sorted({type(e).__name__ for e in self.envs}) or ["no env"]
            raise TypeError(f"{self.name}: {kinds} cannot load world-model weights (PACE needs "
                            "a world-model env, e.g. WanWorldModelEnv)")
        t0 = time.time()
        with Tracer.trace_span("env.load_world_model", version=version):
            got = {e.load_world_model_weights(state_dict, version, reward_state_dict)
                   for e in self.envs}
        self.busy.append(("env", t0, time.time()))
        if got != {version}:
            raise RuntimeError(f"{self.name}: envs report world-model versions {sorted(got)} "
                               f"after loading version {version}")
        self.world_model_version = version
        return version

    def get_world_model_version(self) -> int:
        """The world-model version this actor's envs hold (0: as built from the config)."""
        return self.world_model_version

    def env_model_state(self, stage: int = 0) -> dict[str, Any]:
        """Env ``stage``'s world-model and reward weights as CPU tensors (checks, debugging)."""
        env = self.envs[stage]
        reward = getattr(env.reward_model, "model", None)
        return {"world_model": {k: v.detach().cpu().clone()
                                for k, v in env.model.state_dict().items()},
                "reward": None if not isinstance(reward, torch.nn.Module) else
                {k: v.detach().cpu().clone() for k, v in reward.state_dict().items()}}
