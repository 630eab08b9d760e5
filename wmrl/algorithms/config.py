"""``AlgorithmConfig``: every setting of the update, one typed object (``conf/algorithm``).

Its defaults are the published WoVR recipe and the one source of them: ``conf/algorithm/
grpo.yaml`` composes them (``wmrl.schema.AlgorithmSchema``, this class and the module's
``_target_``, registered as ``schema/algorithm_defaults``; the file names the keys),
``wmrl.schema`` checks a composed config against this class before anything starts, and
``GRPOModule`` takes one. The choice lists are the code's own (``AGGREGATIONS``,
``ADVANTAGE_SCALES``, ``ESTIMATORS``, ``LR_SCHEDULES``). Adding a setting: a field here and its
use (and its comment line in grpo.yaml).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, List, Optional

from wmrl.algorithms.advantages import ESTIMATORS
from wmrl.algorithms.grpo import ADVANTAGE_SCALES, AGGREGATIONS
from wmrl.algorithms.lr_schedule import LR_SCHEDULES
from wmrl.errors import ConfigError, require, require_choice, require_positive, settings_of
from wmrl.weights.dtypes import DTYPES, dtype_name


@dataclass
class AlgorithmConfig:
    # optimizer (AdamW) and learning rate over the run's training steps
    lr: float = 2e-5
    lr_schedule: str = "constant"
    lr_warmup_steps: int = 0
    lr_min_ratio: float = 0.0
    lr_schedule_steps: Optional[int] = None
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-5
    weight_decay: float = 0.01
    grad_clip: Optional[float] = 1.0
    # the dtype of the weights AdamW steps, and of its m and v (GRPOModule checks the trainable
    # parameters against it): float32 = master weights; 16 bits only as a knowing choice
    optimizer_dtype: str = "float32"
    # the clipped surrogate and its aggregation (wmrl/algorithms/grpo.py)
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: Optional[float] = None
    aggregation: str = "traj-mean"
    # advantages and the episodes that enter the update (wmrl/algorithms/update.py)
    adv_estimator: str = "grpo"
    advantage_scale: str = "group"
    filter_groups: bool = True
    return_filter: Optional[List[float]] = None
    drop_unrepeatable: bool = False
    kl_coef: float = 0.0
    # batching: chunk-samples per optimizer step and per forward/backward
    global_batch: int = 256
    micro_batch: int = 32
    update_epochs: int = 1
    gradient_accumulation: bool = True
    max_nonfinite_steps: int = 3

    def __post_init__(self) -> None:
        require_positive("algorithm", self, "lr", "eps", "grad_clip", "global_batch",
                         "micro_batch", "update_epochs", "max_nonfinite_steps")
        require_positive("algorithm", self, "weight_decay", "clip_low", "clip_high",
                         "lr_warmup_steps", "kl_coef", allow_zero=True)
        require_positive("algorithm", self, "lr_schedule_steps")
        require_choice("algorithm.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        require_choice("algorithm.optimizer_dtype", self.optimizer_dtype, tuple(DTYPES))
        self.optimizer_dtype = DTYPES[self.optimizer_dtype]  # torch's name: bf16 -> bfloat16
        require_choice("algorithm.aggregation", self.aggregation, AGGREGATIONS)
        require_choice("algorithm.adv_estimator", self.adv_estimator, tuple(ESTIMATORS))
        require_choice("algorithm.advantage_scale", self.advantage_scale, ADVANTAGE_SCALES)
        require("algorithm.lr_min_ratio", self.lr_min_ratio, 0 <= self.lr_min_ratio <= 1,
                "must be in [0, 1] (the cosine schedule's last lr as a fraction of lr)")
        for i, b in enumerate(self.betas):
            require(f"algorithm.betas[{i}]", b, 0 <= b < 1, "must be in [0, 1)")
        if self.return_filter is not None:
            f = list(self.return_filter)
            require("algorithm.return_filter", f, len(f) == 2 and f[0] <= f[1],
                    "must be [low, high] with low <= high (keep groups whose mean return lies "
                    "in it; RLinf: [0.5, 4.5]) or null")
        if self.dual_clip is not None:
            require("algorithm.dual_clip", self.dual_clip, self.dual_clip > 1,
                    "must be > 1 (the dual-clip bound c of min(max(rA, clip(r)A), cA)) or null")

    @classmethod
    def of(cls, settings: AlgorithmConfig | Mapping[str, Any] | None) -> AlgorithmConfig:
        """An ``AlgorithmConfig`` from itself, a mapping of its fields (a config group, a
        checkpoint's hyper-parameters; ``_target_`` is the module's, ignored) or None (the
        defaults); an unknown key is a ``ConfigError`` (``wmrl.errors.settings_of``)."""
        return settings_of(cls, settings, "algorithm")


def check_optimizer_dtype(policy: Any, optimizer_dtype: str) -> None:
    """The trained parameters must be in ``algorithm.optimizer_dtype``: AdamW steps them (and
    keeps m, v) in their own dtype, and a bf16 weight of scale 0.02 cannot move by lr 2e-5
    (its spacing there is ~1e-4): most updates would round away unseen."""
    optimizer_dtype = dtype_name(optimizer_dtype, "algorithm.optimizer_dtype")  # bf16: bfloat16
    found = sorted({dtype_name(p.dtype) for p in policy.parameters() if p.requires_grad})
    if found and found != [optimizer_dtype]:
        raise ConfigError(
            f"algorithm.optimizer_dtype={optimizer_dtype} but the trained policy parameters are "
            f"{'/'.join(found)}: for float32 master weights with bf16 compute set "
            "policy.dtype=float32 and trainer.precision=bf16-mixed (or strategy.param_dtype="
            "bfloat16 under FSDP), or train LoRA adapters (policy/lora=rlinf: float32 on a "
            f"{'/'.join(found)} base); or accept AdamW in {found[0]} with "
            f"algorithm.optimizer_dtype={found[0]} (docs/precision.md)")
