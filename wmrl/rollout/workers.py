"""``RolloutActor``: the process that holds a rollout role - the policy (sampling), the env
(world model + reward), or both (collocated placement). Plain class, usable in-process;
the DataModule wraps it with ``ray.remote``.

Envs are split into ``stages`` sub-batches (whole groups each) so that, with separate env
and policy actors, the policy samples for one stage while the world model steps another
(hybrid placement). Every mode uses the same stages and per-call seeds, so all placements
produce the same trajectories for the same seed.

Roles exchange numpy arrays (Ray moves them through its shared-memory object store).
When one actor holds both roles, the observation never leaves the process.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from wmrl.config import build
from wmrl.rollout.weight_sync import SyncPayload, WeightReceiver
from wmrl.tracing import Tracer


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


class RolloutActor:
    def __init__(
        self,
        policy: Any = None,
        env: Any = None,
        stages: int = 1,
        num_threads: int | None = None,
        device: str = "cpu",
        offload_idle: bool = True,
        zero_copy_weights: bool = False,
        name: str = "rollout",
        tracing: bool = False,
    ):
        Tracer.configure(enabled=tracing, process_name=name)
        if num_threads:
            torch.set_num_threads(num_threads)
        self.device = torch.device(device)
        # roles take turns on one device: move the idle one off it (no-op on CPU)
        self.offload_idle = offload_idle and policy is not None and env is not None \
            and self.device.type != "cpu"
        self.policy = build(policy).to(self.device).eval() if policy is not None else None
        self.envs: list[Any] = []
        if env is not None:
            env = dict(env)
            if env["num_envs"] % stages:
                raise ValueError(f"num_envs={env['num_envs']} does not split into {stages} stages")
            env["num_envs"] //= stages
            self.envs = [build(env) for _ in range(stages)]
        self.generator = torch.Generator(device=self.device)
        # version -1 until the first sync; zero-copy aliases the object store (CPU only)
        self.weights = WeightReceiver(self.policy, zero_copy=zero_copy_weights and
                                      self.device.type == "cpu") if self.policy else None
        self.last_obs: dict[int, dict] = {}
        self.busy: list[tuple[str, float, float]] = []  # (role, start, end) wall clock
        self.reward_s = 0.0  # reward-model time inside env steps (envs that report it)
        self.active_role: str | None = None

    # ---- roles -------------------------------------------------------------------------
    def _switch_to(self, role: str) -> None:
        if not self.offload_idle or role == self.active_role:
            return
        t0 = time.time()
        env_model = [e for e in self.envs if hasattr(e, "offload")]
        if role == "policy":
            for e in env_model:
                e.offload()
            self.policy.to(self.device)
        else:
            self.policy.to("cpu")
            for e in env_model:
                e.onload()
        self.active_role = role
        self.busy.append(("offload", t0, time.time()))

    def reset(self, stage: int, seed: int) -> dict:
        t0 = time.time()
        self._switch_to("env")
        with Tracer.trace_span("env.reset", stage=stage):
            obs = to_numpy_obs(self.envs[stage].reset(seed=seed))
        self.last_obs[stage] = obs
        self.busy.append(("env", t0, time.time()))
        return obs

    def chunk_step(self, stage: int, actions: np.ndarray) -> tuple[dict, dict]:
        """-> (next obs, step record: [B, C] rewards/terminations/truncations, success [B])."""
        t0 = time.time()
        self._switch_to("env")
        env = self.envs[stage]
        reward_before = getattr(env, "timings", {}).get("reward", 0.0)
        with Tracer.trace_span("env.chunk_step", stage=stage):
            obs, rewards, terms, truncs, info = env.chunk_step(
                torch.from_numpy(np.asarray(actions)))
        self.reward_s += getattr(env, "timings", {}).get("reward", 0.0) - reward_before
        record = {
            "rewards": torch.as_tensor(rewards, dtype=torch.float32).cpu().numpy(),
            "terminations": torch.as_tensor(terms).bool().cpu().numpy(),
            "truncations": torch.as_tensor(truncs).bool().cpu().numpy(),
            "success": torch.as_tensor(info["success"]).bool().cpu().numpy(),
        }
        obs = to_numpy_obs(obs)
        self.last_obs[stage] = obs
        self.busy.append(("env", t0, time.time()))
        return obs, record

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
            out = self.policy.sample(to_torch_obs(obs, self.device), temperature,
                                     self.generator)
        record = {
            "image": obs["image"],
            "task": list(obs["task"]),
            "tokens": out.tokens.cpu().numpy(),
            "logprobs": out.logprobs.float().cpu().numpy(),
            "version": version,
        }
        self.busy.append(("policy", t0, time.time()))
        return out.actions.float().cpu().numpy(), record

    # ---- weights -----------------------------------------------------------------------
    def apply_weights(self, payload: SyncPayload) -> int:
        """Bucketed, versioned sync (``wmrl.rollout.weight_sync``); returns the new version."""
        with Tracer.trace_span("policy.apply_weights", version=payload.version):
            return self.weights.apply(payload)

    def ready(self) -> bool:
        return True

    def get_version(self) -> int:
        return self.weights.version

    def get_state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy() for k, v in self.policy.state_dict().items()}

    def pop_step_record(self) -> tuple[list[tuple[str, float, float]], list[dict], float]:
        """Once per step: busy intervals (role, start, end), this process's trace events and
        the reward model's seconds."""
        busy, self.busy = self.busy, []
        reward_s, self.reward_s = self.reward_s, 0.0
        return busy, Tracer.flush(), reward_s
