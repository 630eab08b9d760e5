"""``RolloutConfig``: every setting of the rollout group (``conf/rollout``), one typed object.

The one source of the rollout's defaults and ranges: ``RolloutDataModule`` takes its settings
through ``RolloutConfig.of``, ``wmrl.schema.RolloutSchema`` is this class with the choices as
enums (one-line errors at the config check) and its defaults are what ``conf/rollout/
default.yaml`` composes to (the file names the keys; Hydra reads the values from the schema).
The choice lists are the code's own (``engine.PLACEMENTS``, ``placement.DEVICES``,
``weight_sync.types.TRANSPORTS``; the dtypes: ``wmrl.weights.dtypes``), checked where they are
used. A mapping becomes one through ``wmrl.errors.settings_of``, as ``AlgorithmConfig`` does.
Adding a setting: a field here and its use (and its comment line in default.yaml).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from wmrl.build import to_container
from wmrl.errors import require, require_positive, settings_of


@dataclass
class WeightSyncConfig:
    """``rollout.weight_sync``: trainer -> policy actors (``wmrl.rollout.weight_sync``)."""

    bucket_mb: float = 256.0
    delta: bool = False  # send only changed elements (for slow links; Adam updates are dense)
    # cpu (Ray object store) | gloo | device (NCCL/RCCL/HCCL/MCCL): the collectives run in a
    # group of each trainer rank + its policy actors
    transport: str = "cpu"
    zero_copy: bool = True  # CPU policy actors alias the shared (read-only) weights: no copy
    max_delta_fraction: float = 0.5  # delta: a bucket goes whole once its changes cost this

    def __post_init__(self) -> None:
        require_positive("rollout.weight_sync", self, "bucket_mb", "max_delta_fraction")


@dataclass
class RolloutConfig:
    num_envs: int = 32  # envs per rollout epoch
    group_size: int = 8  # consecutive envs sharing one initial state (a GRPO group)
    rollout_epochs: int = 1  # rollout epochs per training step (episodes = epochs x num_envs)
    max_episode_steps: int = 64  # env steps per episode (a multiple of chunk)
    chunk: int = 8  # actions per policy call
    temperature: float = 1.6  # sampling temperature (also used to recompute log-probs)
    placement: str = "disaggregated"  # collocated | disaggregated | hybrid (docs/trainer.md)
    pipeline_stages: int = 1  # env sub-batches in flight (hybrid: >= 2)
    num_env_workers: int = 1
    num_rollout_workers: int = 1
    worker_cpus: float = 0.5  # Ray CPUs reserved per actor
    # auto | cpu | cuda | npu | musa | xpu: what the actors compute on (auto: the card Ray
    # assigned, none -> cpu; collocated: the trainer's)
    device: str = "auto"
    env_resources: Optional[Dict[str, float]] = None  # Ray resources per env actor
    policy_resources: Optional[Dict[str, float]] = None  # per policy actor (not collocated)
    worker_threads: Optional[int] = 1  # torch threads per actor
    ray_address: Optional[str] = None  # join a running Ray cluster instead of a local one
    ray_num_cpus: Optional[int] = None
    actor_start_timeout_s: float = 600.0  # fail (not hang) when Ray cannot place the actors
    step_timeout_s: float = 3600.0  # fail (not hang) when a rollout step or sync takes longer
    max_actor_restarts: int = 3  # a dead actor is restarted; more deaths in one step: error
    overlap_resets: bool = True  # the next step's env resets run during the update
    compute_on_cpu: bool = False  # test switch: resolve devices as placed, compute on the CPU
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)
    policy_dtype: Optional[str] = None  # the actors' policy dtype (null: policy.dtype)

    def __post_init__(self) -> None:
        require_positive("rollout", self, "num_envs", "rollout_epochs", "max_episode_steps",
                         "chunk", "temperature", "pipeline_stages", "num_env_workers",
                         "num_rollout_workers", "worker_threads", "ray_num_cpus",
                         "actor_start_timeout_s", "step_timeout_s")
        require_positive("rollout", self, "worker_cpus", "max_actor_restarts", allow_zero=True)
        require("rollout.group_size", self.group_size, self.group_size >= 2,
                "GRPO needs a group of >= 2 rollouts per initial state (with 1 every "
                "advantage is zero and nothing is learned)")

    @classmethod
    def of(cls, settings: RolloutConfig | Mapping[str, Any] | None = None) -> RolloutConfig:
        """A ``RolloutConfig`` from a mapping of its fields (a config group, keyword
        arguments; ``weight_sync`` a mapping of its own, partial or whole): what it leaves out
        takes the default, an unknown key is a ``ConfigError`` (``wmrl.errors.settings_of``;
        a config group's values made plain first)."""
        if isinstance(settings, cls):
            return settings
        plain = {k: to_container(v) for k, v in dict(settings or {}).items()}
        return settings_of(cls, plain, "rollout")
