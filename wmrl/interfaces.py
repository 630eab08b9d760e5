"""The contracts between the parts (docs/trainer.md). Plain Protocols: implementations
do not inherit from them; tests check conformance with ``isinstance`` where useful.

Shapes: B envs, C = chunk (8), D = action_dim (7), L = C * D action tokens.
obs = {"image": uint8 tensor [B, H, W, 3], "task": list[str] of length B}.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@dataclass
class PolicySample:
    """What ``Policy.sample`` returns."""

    tokens: torch.Tensor  # long [B, L]: action bin indices in [0, n_bins)
    actions: torch.Tensor  # float [B, C, D]: continuous, un-normalised env actions
    logprobs: torch.Tensor  # float [B, L]: log pi(token) at the sampling temperature


@runtime_checkable
class Policy(Protocol):
    chunk: int
    action_dim: int

    def sample(
        self, obs: dict, temperature: float, generator: torch.Generator | None = None
    ) -> PolicySample: ...

    def log_probs(
        self, obs: dict, tokens: torch.Tensor, temperature: float, return_entropy: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Differentiable per-token log-probs [B, L] (and per-token entropy [B, L])."""
        ...


@runtime_checkable
class RewardModel(Protocol):
    """A stateless callable ``(frames, tasks)`` is enough. A reward that keeps per-env
    history (TOPReward) also has ``reset(env_ids=None)`` and takes ``env_ids`` (long [B]:
    which env each row is, since finished envs drop out of the batch)."""

    def __call__(self, frames: torch.Tensor, tasks: list[str]) -> torch.Tensor:
        """frames uint8 [B, C, H, W, 3] -> per-frame success scores in [0, 1], float [B, C]."""
        ...


@runtime_checkable
class ChunkEnv(Protocol):
    num_envs: int
    group_size: int
    chunk: int

    def reset(self, seed: int | None = None) -> dict: ...

    def chunk_step(
        self, actions: torch.Tensor
    ) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """actions [B, C, D] -> (obs, rewards [B, C], terminations [B, C] bool,
        truncations [B, C] bool, info)."""
        ...


@runtime_checkable
class RolloutSource(Protocol):
    """What ``GRPOModule``'s step and the callbacks use of the DataModule
    (``RolloutDataModule``).

    ``placement``: ``collocated`` | ``disaggregated`` | ``hybrid``."""

    placement: str

    def rollout(self, weights: Any = None) -> TrajectoryBatch:
        """One trajectory batch made with the policy version the actors hold (the last
        ``sync_weights``); ``weights()`` gives that version's weights again for an actor
        restarted meanwhile."""
        ...

    def sync_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        """Send the trainer's policy weights to every rollout actor as ``version``;
        returns the seconds it took."""
        ...

    def shares_trainer_device(self) -> bool:
        """Whether the rollout computes on the trainer's own card (the trainer's state
        must leave it during the rollout)."""
        ...

    def step_timing(self) -> dict[str, float]:
        """Seconds of the last rollout by part (``rollout_s``, ``idle_s``, ...): logged by
        ``GRPOModule`` as ``time/*``."""
        ...

    def pop_trace_events(self) -> list[dict]:
        """The rollout actors' trace spans since the last call (``TracingCallback``)."""
        ...


@runtime_checkable
class PolicyTrainer(Protocol):
    """What the callbacks use of the LightningModule (``GRPOModule``).

    ``policy``: the trained ``Policy`` module; ``policy_version``: optimizer updates applied
    so far (= the version rollouts must carry); ``history``: one metrics dict per training
    step of this run (``rollout/*``, ``train/*``, ``time/*``; with PACE on, ``pace/*``)."""

    policy: Any
    policy_version: int
    history: list[dict[str, float]]

    @property
    def last_metrics(self) -> dict[str, float]:
        """The last training step's metrics (empty before the first step)."""
        ...


@dataclass
class TrajectoryBatch:
    """One rollout batch, engine -> ``RolloutDataModule`` -> ``GRPOModule``.

    N = epochs x num_envs trajectories (``group_size`` consecutive ones share an initial
    state), K chunks, C env steps per chunk, L = C x D tokens per chunk::

        image      uint8   [N, K, H, W, 3]   observation the policy saw before chunk k
        tokens     int64   [N, K, L]         sampled action bins
        logprobs   float32 [N, K, L]         log-probs at sampling time (the "old" policy)
        rewards    float32 [N, K*C]          per env step
        dones      bool    [N, K*C]          termination or truncation
        success    bool    [N]               success at any step of the episode
        task       list[str] of N
        version    int                       policy weight version every sample used
        resample_success bool [N] or None    the env's second verdict on each episode's last
                                             chunk, imagined again from other noise (None:
                                             the env has no resample check)

    Arrays are numpy inside the rollout engine and torch tensors (``to_torch``) after it.
    """

    image: Any
    tokens: Any
    logprobs: Any
    rewards: Any
    dones: Any
    success: Any
    task: list[str]
    version: int
    resample_success: Any = None

    ARRAYS = ("image", "tokens", "logprobs", "rewards", "dones", "success")

    def to_torch(self) -> TrajectoryBatch:
        """numpy arrays -> torch tensors (no copy for contiguous arrays)."""
        def conv(x):
            return torch.from_numpy(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x

        return TrajectoryBatch(**{f.name: conv(getattr(self, f.name)) for f in fields(self)})

    @property
    def num_trajectories(self) -> int:
        return len(self.task)
