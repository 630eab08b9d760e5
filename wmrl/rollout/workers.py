"""The two rollout roles. Plain classes (usable in-process, e.g. in tests); the DataModule
wraps them with ``ray.remote``. They exchange numpy arrays (Ray moves those zero-copy
through its object store) and build their models lazily from picklable configs."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from wmrl.config import build


def _to_numpy_obs(obs: dict) -> dict:
    image = obs["image"]
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    return {"image": np.ascontiguousarray(image), "task": list(obs["task"])}


def _to_torch_obs(obs: dict, device: torch.device | str = "cpu") -> dict:
    image = obs["image"]
    if isinstance(image, np.ndarray):
        image = torch.from_numpy(np.ascontiguousarray(image))
    return {"image": image.to(device), "task": list(obs["task"])}


class RolloutWorker:
    """Holds a copy of the policy; samples action chunks at a temperature."""

    def __init__(self, policy: Any, seed: int = 0, num_threads: int | None = None,
                 device: str = "cpu"):
        if num_threads:
            torch.set_num_threads(num_threads)
        self.device = torch.device(device)
        self.policy = build(policy).to(self.device).eval()
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.version = -1  # no weights received yet
        self.busy_s = 0.0

    def set_seed(self, seed: int) -> None:
        self.generator.manual_seed(seed)

    @torch.no_grad()
    def sample(self, obs: dict, temperature: float) -> tuple[np.ndarray, dict]:
        """-> (actions [B, C, D] float32 for the env, record for the trainer)."""
        t0 = time.perf_counter()
        out = self.policy.sample(_to_torch_obs(obs, self.device), temperature, self.generator)
        actions = out.actions.float().cpu().numpy()
        record = {
            "image": obs["image"],
            "task": list(obs["task"]),
            "tokens": out.tokens.cpu().numpy(),
            "logprobs": out.logprobs.float().cpu().numpy(),
            "version": self.version,
        }
        self.busy_s += time.perf_counter() - t0
        return actions, record

    def apply_weights(self, state: dict[str, np.ndarray], version: int) -> int:
        """Full-copy weight sync: copy every array into the matching parameter/buffer."""
        own = self.policy.state_dict()
        missing = set(own) - set(state)
        if missing:
            raise KeyError(f"weight sync is missing {sorted(missing)[:5]} (version {version})")
        with torch.no_grad():
            for name, value in state.items():
                own[name].copy_(torch.from_numpy(np.asarray(value)))
        self.version = version
        return version

    def get_version(self) -> int:
        return self.version

    def get_state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy() for k, v in self.policy.state_dict().items()}

    def pop_busy_seconds(self) -> float:
        busy, self.busy_s = self.busy_s, 0.0
        return busy


class EnvWorker:
    """Holds a batch of grouped envs (the world model + its reward model)."""

    def __init__(self, env: Any, num_threads: int | None = None):
        if num_threads:
            torch.set_num_threads(num_threads)
        self.env = build(env)
        self.busy_s = 0.0

    def reset(self, seed: int) -> dict:
        t0 = time.perf_counter()
        obs = _to_numpy_obs(self.env.reset(seed=seed))
        self.busy_s += time.perf_counter() - t0
        return obs

    def chunk_step(self, actions: np.ndarray) -> tuple[dict, dict]:
        """-> (next obs, step record [B, C] arrays + per-env success)."""
        t0 = time.perf_counter()
        obs, rewards, terms, truncs, info = self.env.chunk_step(torch.from_numpy(actions))
        record = {
            "rewards": np.asarray(torch.as_tensor(rewards, dtype=torch.float32)),
            "terminations": np.asarray(torch.as_tensor(terms).bool()),
            "truncations": np.asarray(torch.as_tensor(truncs).bool()),
            "success": np.asarray(torch.as_tensor(info["success"]).bool()),
        }
        self.busy_s += time.perf_counter() - t0
        return _to_numpy_obs(obs), record

    def pop_busy_seconds(self) -> float:
        busy, self.busy_s = self.busy_s, 0.0
        return busy
