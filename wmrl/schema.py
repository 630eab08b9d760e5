"""Typed schemas of the fit config's groups (Hydra structured configs): defaults, types,
choices and ranges, checked before Ray or any model starts.

``check(cfg)`` merges each composed group into its dataclass with OmegaConf (types and
choices: wrong type, unknown key, value outside an enum) and builds the dataclass
(``__post_init__``: ranges). Every failure becomes one ``ConfigError`` line naming the full
key, the value and what is allowed.

- Plain groups (``SCHEMAS``: ``task``, ``rollout``, ``algorithm``, ``checkpoint``): every key is
  checked; ``with_defaults`` fills what a config leaves out. Also in Hydra's ConfigStore
  (``schema/<group>``) for projects that compose them themselves.
- ``_target_`` specs (``TARGET_SCHEMAS``: ``policy``, ``env``, ``reward``, ``pace``): the scalar settings
  of a known target (``build_policy``, ``WanWorldModelEnv``, the ResNet and TOPReward rewards, ``Pace``);
  other keys go to the constructor, paths and architectures to ``wmrl.config.check_paths``.

The components import nothing from here: their constructors keep plain defaults, which a test
holds equal to these (``tests/test_config.py``), and the choice lists are the code's own. The
algorithm and the rollout are typed objects of their own packages (``AlgorithmConfig``,
``RolloutConfig``), which the schemas extend: those hold their defaults. PACE's is here
(``PaceConfig``): its package is on a floor above this check, and ``Pace`` takes it from here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Dict, List, Optional, Union

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from wmrl.algorithms.config import AlgorithmConfig
from wmrl.algorithms.lr_schedule import LR_SCHEDULES
from wmrl.errors import ConfigError, require, require_positive, settings_of
from wmrl.policies.openvla_oft import LORA_TARGETS, SUPPORTED_ATTN
from wmrl.rewards.resnet import ARCHS as REWARD_ARCHS
from wmrl.rewards.shaping import RESAMPLE_RETURNS
from wmrl.rollout.config import RolloutConfig, WeightSyncConfig
from wmrl.rollout.engine import PLACEMENTS
from wmrl.rollout.placement import DEVICES
from wmrl.rollout.weight_sync.types import TRANSPORTS
from wmrl.sim.tasks import CAMERAS, TASK_NAMES
from wmrl.weights.dtypes import DTYPES
from wmrl.weights.lora import lora_config


def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    """An Enum whose member names are the config strings (OmegaConf matches by name)."""
    return Enum(name, {v: v for v in values})


# the choice lists are the code's own; every dtype setting takes the one table's names
# (wmrl.weights.dtypes: float32 / fp32, bfloat16 / bf16, float16 / fp16)
DType = _choices("DType", tuple(DTYPES))
Placement = _choices("Placement", PLACEMENTS)
RolloutDevice = _choices("RolloutDevice", DEVICES)
Transport = _choices("Transport", TRANSPORTS)


def _member(choices: type[Enum], value: str | None) -> Any:
    """The enum member named ``value`` (a config class's plain default), None for None."""
    return None if value is None else choices[value]


@dataclass
class WeightSyncSchema(WeightSyncConfig):
    """``rollout.weight_sync``: ``wmrl.rollout.config.WeightSyncConfig`` (defaults and ranges
    there), its transport a choice."""

    transport: Transport = _member(Transport, WeightSyncConfig.transport)


@dataclass
class RolloutSchema(RolloutConfig):
    """``rollout``: the DataModule (``_target_``) and its settings,
    ``wmrl.rollout.config.RolloutConfig`` (defaults and ranges there); here its choices as
    enums, refused in one line at the config check."""

    placement: Placement = _member(Placement, RolloutConfig.placement)
    device: RolloutDevice = _member(RolloutDevice, RolloutConfig.device)
    weight_sync: WeightSyncSchema = field(default_factory=WeightSyncSchema)
    policy_dtype: Optional[DType] = _member(DType, RolloutConfig.policy_dtype)
    _target_: str = "wmrl.rollout.datamodule.RolloutDataModule"


@dataclass
class AlgorithmSchema(AlgorithmConfig):
    """``algorithm``: the module that runs the update (``_target_``) and its settings,
    ``wmrl.algorithms.config.AlgorithmConfig`` (defaults, choices and ranges are there)."""

    _target_: str = "wmrl.module.GRPOModule"


@dataclass
class CheckpointSchema:
    every_n_steps: int = 1
    keep_last: int = 3

    def __post_init__(self) -> None:
        require_positive("checkpoint", self, "every_n_steps")
        require("checkpoint.keep_last", self.keep_last, self.keep_last >= -1,
                 "the number of step checkpoints kept beside last.ckpt (0: none, -1: all)")


ResampleReturn = _choices("ResampleReturn", RESAMPLE_RETURNS)


@dataclass
class WanEnvSchema:
    """The scalar settings of ``env`` when it is ``wmrl.envs.wan_env.WanWorldModelEnv`` (its
    constructor takes its defaults from here). The model, reward and initial-states specs are
    checked by their loaders and ``wmrl.config.check_paths``."""

    condition_frames: int = 5
    num_inference_steps: int = 5
    success_threshold: float = 0.9
    use_rel_reward: bool = False
    reward_coef: float = 5.0
    reuse_generated_latents: bool = False
    kir_reset: bool = False
    max_regenerations: int = 3
    return_frames: bool = False
    resample_check: bool = False
    resample_return: Optional[ResampleReturn] = None
    context_noise_sigma: float = 0.0

    def __post_init__(self) -> None:
        require_positive("env", self, "condition_frames", "num_inference_steps", "reward_coef")
        require_positive("env", self, "max_regenerations", "context_noise_sigma",
                         allow_zero=True)
        require("env.success_threshold", self.success_threshold,
                 0 <= self.success_threshold <= 1,
                 "must be in [0, 1] (an episode succeeds when the reward's per-frame success "
                 "score reaches it)")


@dataclass
class TrainPoolSchema:
    """``task.train_pool``: the scenes GRPO starts from, apart from every evaluation set:
    ``size`` scenes of the task drawn with ``seed`` (a seed no evaluation uses), their first
    frames rendered by the simulator once and cached in ``dir`` (null: under
    ``$WMRL_CACHE``, default ``~/.cache/wmrl``; ``wmrl.envs.train_pool``)."""

    seed: int = 3
    size: int = 2048
    dir: Optional[str] = None


@dataclass
class TaskSchema:
    """``task`` (conf/task): the tabletop task that the env, the rollout, the sim eval and the
    asset pipeline interpolate. The defaults are the shipped assets' task. A group file states
    every key, since other groups interpolate them (``${task.name}``) before the defaults merge."""

    name: str = "red_of_two"
    image_size: List[int] = field(default_factory=lambda: [64, 64])  # [H, W]
    camera: str = "front_close"
    max_episode_steps: int = 64
    eval_seed: int = 0
    num_states: int = 256
    unseen_eval_seed: int = 1
    train_pool: Optional[TrainPoolSchema] = None  # null: GRPO starts from the eval_seed scenes

    def __post_init__(self) -> None:
        require("task.name", self.name, self.name in TASK_NAMES,
                 f"one of {list(TASK_NAMES)} (wmrl.sim.tasks.TASKS)")
        require("task.camera", self.camera, self.camera in CAMERAS,
                 f"one of {list(CAMERAS)} (the cameras of wmrl.sim.tabletop's scene)")
        size = list(self.image_size)
        require("task.image_size", size, len(size) == 2 and min(size) > 0,
                 "[H, W]: two positive ints")
        require_positive("task", self, "max_episode_steps", "num_states")
        if self.train_pool is not None:
            require_positive("task.train_pool", self.train_pool, "size")
            evals = {self.eval_seed, self.unseen_eval_seed}
            require("task.train_pool.seed", self.train_pool.seed,
                     self.train_pool.seed not in evals,
                     f"a seed no evaluation uses (task.eval_seed={self.eval_seed} and "
                     f"task.unseen_eval_seed={self.unseen_eval_seed} are scored by the sim eval)")


PolicyAttention = _choices("PolicyAttention", SUPPORTED_ATTN)


@dataclass
class PolicySchema:
    """The scalar settings of ``policy`` when it is ``wmrl.policies.openvla_oft.build_policy``
    (its defaults come from here). ``pretrained_path``, ``config`` and ``overrides`` are checked
    by the loader and ``wmrl.config.check_paths``."""

    unnorm_key: Optional[str] = None
    dtype: DType = DType["float32"]
    gradient_checkpointing: bool = False
    attn_implementation: PolicyAttention = PolicyAttention["sdpa"]
    seed: int = 0
    fused_ops: Optional[Union[bool, str]] = False
    lora: Optional[Dict[str, Any]] = None

    def __post_init__(self) -> None:
        from strategies.devices import FAMILIES  # torch: imported only when a config is checked
        from strategies.fused import fused_ops_config

        if self.lora is not None and not self.lora.get("path"):
            lora_config(self.lora, LORA_TARGETS)  # the spec's keys and values, before a build

        kinds = ["cpu", *FAMILIES]
        require("policy.fused_ops", self.fused_ops,
                 fused_ops_config(self.fused_ops) in (None, "auto", *kinds),
                 f"false, true or auto (this process's device family), or one of {kinds}")


@dataclass
class ResNetRewardSchema:
    """The scalar settings of ``reward`` when it is ``wmrl.rewards.resnet.ResNetSuccessReward``
    (its defaults come from here). ``checkpoint`` and ``config`` (the architecture) are checked
    by the loader, ``wmrl.config.check_paths`` and ``wmrl.asset_checks``."""

    round: bool = True
    device: str = "cpu"
    seed: int = 0
    batch_size: int = 256

    def __post_init__(self) -> None:
        require_positive("reward", self, "batch_size")


@dataclass
class TaskResNetRewardSchema(ResNetRewardSchema):
    """``wmrl.rewards.resnet.TaskResNetSuccessReward``: the ResNet's settings and its task list."""

    tasks: Optional[List[str]] = None


TOPRewardDType = _choices("TOPRewardDType", ("auto", *DTYPES))


@dataclass
class TOPRewardSchema:
    """The scalar settings of ``reward`` when it is ``wmrl.rewards.topreward.TOPReward`` (its
    defaults come from here; ``model_path`` is read by its loader)."""

    window: int = 16
    threshold: float = 0.46
    binary: bool = True
    video_fps: float = 20.0
    device: str = "cpu"
    dtype: TOPRewardDType = TOPRewardDType["auto"]  # auto: bfloat16 on accelerators, else float32
    attn_implementation: str = "sdpa"
    max_batch: Optional[int] = None

    def __post_init__(self) -> None:
        require_positive("reward", self, "window", "video_fps", "max_batch")
        require("reward.threshold", self.threshold, 0 <= self.threshold <= 1,
                 "must be in [0, 1] (a frame succeeds when P(\" True\") reaches it)")


# PACE's choices (wmrl/pace/round.py: episode_specs, Pace.finetune_reward)
SCENES = ("fixed", "random")
REWARD_FRAMES = ("real", "imagined")
Scenes = _choices("Scenes", SCENES)
RewardFrames = _choices("RewardFrames", REWARD_FRAMES)


@dataclass
class PaceConfig:
    """Every scalar setting of PACE (``pace``), one typed object: the one source of their
    defaults and ranges. ``wmrl.pace.round.Pace`` takes them through ``PaceConfig.of``
    (``Pace.settings``); ``PaceSchema`` is this class with the choices as enums, and
    conf/pace/default.yaml composes its values (``schema/pace_defaults``), names the keys and
    interpolates those another group owns (explaining each). It sits here, not in wmrl/pace/,
    because the config check is on a floor below PACE's (tests/test_layout.py). Adding a
    setting: a field here and its use (and its comment line in default.yaml)."""

    every_n_steps: int = 5  # a round after every N training steps (0: never)
    episodes: int = 96  # real simulator episodes per round
    steps: int = 300  # world-model fine-tune steps per round
    lr: float = 1e-4  # the fine-tune's constant lr (AdamW, kept across rounds)
    batch_size: int = 32  # clips per fine-tune step
    weight_decay: float = 0.0
    temperature: float = 1.0  # the policy's sampling temperature in the simulator
    scenes: str = "random"  # random: fresh seeded scenes | fixed: the task's initial states
    num_states: int = 256  # the task's fixed initial states (scenes=fixed)
    post_success_steps: Optional[int] = 8  # steps after the first success (null: it ends)
    num_envs: int = 16  # simulator envs stepped together
    buffer_rounds: int = 4  # fine-tune on the clips of the last N rounds
    context_noise_sigma: float = 0.1  # the world-model objective's (as its training)
    foreground_weight: float = 0.0
    own_context_fraction: float = 0.0  # share of a batch with the model's own imagined context
    own_context_refresh: int = 200  # fine-tune steps between two replays of the round's episodes
    own_context_episodes: int = 64  # the round's episodes replayed at a refresh
    gripper_event_weight: float = 1.0
    eval_clips: int = 64  # clips of the fixed-noise loss before / after a round
    reward_steps: int = 0  # > 0: also fine-tune the reward classifier
    reward_lr: float = 1e-4
    reward_batch_size: int = 64
    reward_frames: str = "real"  # real: the simulator's frames | imagined: the replays
    reward_holdout: float = 0.25  # imagined: the episodes held out to score the reward
    success_threshold: float = 0.9  # the reward's verdict threshold for those scores
    num_inference_steps: int = 5  # the replays' denoising steps
    dtype: str = "float32"  # the fine-tuned copy's (actors cast to their own)
    device: Optional[str] = None  # None: the trainer's
    seed: int = 0
    out_dir: Optional[str] = None  # history.jsonl, summary.json (None: no files)
    verbose: bool = True  # a line per round and the budget at the end (rank 0)

    def __post_init__(self) -> None:
        require_positive("pace", self, "episodes", "lr", "batch_size", "temperature",
                         "num_states", "num_envs", "buffer_rounds", "gripper_event_weight",
                         "eval_clips", "reward_lr", "reward_batch_size", "num_inference_steps",
                         "own_context_refresh", "own_context_episodes")
        require_positive("pace", self, "every_n_steps", "steps", "weight_decay",
                         "post_success_steps", "context_noise_sigma", "foreground_weight",
                         "reward_steps", allow_zero=True)
        require("pace.own_context_fraction", self.own_context_fraction,
                0 <= self.own_context_fraction < 1,
                "must be in [0, 1) (the share of each fine-tune batch whose context the model "
                "imagined; 0: off)")
        require("pace.reward_holdout", self.reward_holdout, 0 <= self.reward_holdout < 1,
                "must be in [0, 1) (the share of a round's episodes held out to score the "
                "reward on imagined frames)")
        require("pace.success_threshold", self.success_threshold,
                0 <= self.success_threshold <= 1, "must be in [0, 1] (env.success_threshold)")

    @classmethod
    def of(cls, settings: PaceConfig | Mapping[str, Any] | None = None) -> PaceConfig:
        """A ``PaceConfig`` from itself, a mapping of its fields (the ``pace`` group's scalar
        keys, keyword arguments) or None (the defaults); an unknown key is a ``ConfigError``
        (``wmrl.errors.settings_of``, as ``AlgorithmConfig`` and ``RolloutConfig``)."""
        return settings_of(cls, settings, "pace")


@dataclass
class PaceSchema(PaceConfig):
    """``pace``: ``wmrl.pace.round.Pace`` (``_target_``) and its scalar settings,
    ``PaceConfig`` (defaults and ranges there); here its choices as enums, refused in one line
    at the config check. The world-model, reward, task and simulator settings are
    interpolated from their groups (conf/pace/default.yaml)."""

    scenes: Scenes = _member(Scenes, PaceConfig.scenes)
    reward_frames: RewardFrames = _member(RewardFrames, PaceConfig.reward_frames)
    dtype: DType = _member(DType, PaceConfig.dtype)
    _target_: str = "wmrl.pace.round.Pace"


# -- the configs of the entry points other than the fit (scripts/finetune_world_model.py,
# scripts/train_reward.py): their yaml holds the defaults, these the types, choices and
# ranges, checked whole (``check_entry``) before any data or model loads
LRSchedule = _choices("LRSchedule", LR_SCHEDULES)


@dataclass
class WorldModelFinetuneSchema:
    """``module`` of conf/finetune_world_model.yaml: ``WorldModelFinetune``'s settings (a test
    holds the keys equal to its constructor's)."""

    lr: float = MISSING
    weight_decay: float = MISSING
    betas: List[float] = MISSING
    lr_schedule: LRSchedule = MISSING
    warmup_steps: int = MISSING
    train_action_modules: bool = MISSING
    gradient_checkpointing: bool = MISSING
    num_inference_steps: int = MISSING
    video_clips: int = MISSING
    horizon_episodes: int = MISSING
    lr_min_ratio: float = MISSING
    grad_clip: Optional[float] = MISSING
    gripper_event_weight: float = MISSING
    own_context_fraction: float = MISSING
    own_context_refresh: int = MISSING
    own_context_episodes: int = MISSING
    part: str = MISSING

    def __post_init__(self) -> None:
        require("module.part", self.part, self.part == "dit", "the fine-tune trains the DiT "
                "(part=dit); the VAE stage is scripts/train_world_model.py's (vae_train)")
        require("module.own_context_fraction", self.own_context_fraction,
                0 <= self.own_context_fraction < 1, "must be in [0, 1) (the share of each "
                "batch whose context the model imagined; 0: off)")
        require_positive("module", self, "lr", "num_inference_steps", "grad_clip",
                         "own_context_refresh", "own_context_episodes")
        require_positive("module", self, "weight_decay", "warmup_steps", "video_clips",
                         "horizon_episodes", "lr_min_ratio", "gripper_event_weight",
                         allow_zero=True)


@dataclass
class WorldModelClipsSchema:
    """``data`` of conf/finetune_world_model.yaml (``WorldModelClipData``: it checks the
    format and the paths)."""

    format: str = MISSING
    paths: List[str] = MISSING
    camera: Optional[str] = MISSING
    size: Optional[List[int]] = MISSING
    batch_size: int = MISSING
    val_episodes: int = MISSING
    val_chunks_per_episode: int = MISSING
    shuffle_buffer: int = MISSING
    num_workers: int = MISSING

    def __post_init__(self) -> None:
        require_positive("data", self, "batch_size", "val_chunks_per_episode", "shuffle_buffer")
        require_positive("data", self, "val_episodes", "num_workers", allow_zero=True)


@dataclass
class FinetuneWorldModelConfig:
    """conf/finetune_world_model.yaml. ``objective`` and ``lora`` are checked by
    ``WorldModelFinetune``'s constructor, ``strategy``/``logger``/``trainer`` by Lightning,
    both before the model loads."""

    seed: int = MISSING
    out_dir: str = MISSING
    overwrite: bool = MISSING  # replace an out_dir holding other files (wmrl.io.atomic)
    run_dir: str = MISSING
    ckpt_path: Optional[str] = MISSING
    validate_first: bool = MISSING
    world_model: Dict[str, Any] = MISSING
    data: WorldModelClipsSchema = MISSING
    objective: Dict[str, Any] = MISSING
    lora: Optional[Dict[str, Any]] = MISSING
    module: WorldModelFinetuneSchema = MISSING
    checkpoint: CheckpointSchema = MISSING
    strategy: Dict[str, Any] = MISSING
    logger: Any = MISSING
    trainer: Dict[str, Any] = MISSING


RewardArch = _choices("RewardArch", tuple(REWARD_ARCHS))
# the loaders of wmrl.finetune.reward_datasets (a floor above: a test holds them equal)
RewardDataFormat = _choices("RewardDataFormat", ("frames", "trajectories", "lerobot"))


@dataclass
class RewardModelSchema:
    """``model`` of conf/train_reward.yaml: the classifier's architecture
    (``wmrl.rewards.resnet``; ``num_tasks`` etc. are used by ``arch=resnet_task``)."""

    widths: List[int] = MISSING
    blocks_per_stage: int = MISSING
    image_size: Optional[List[int]] = MISSING
    num_tasks: int = MISSING
    task_embed_dim: int = MISSING
    fusion_hidden: int = MISSING
    dropout: float = MISSING

    def __post_init__(self) -> None:
        require("model.widths", self.widths, len(self.widths) == 4 and min(self.widths) > 0,
                "four positive channel counts (one per ResNet stage)")
        require_positive("model", self, "blocks_per_stage", "num_tasks", "task_embed_dim",
                         "fusion_hidden")
        require("model.dropout", self.dropout, 0 <= self.dropout < 1, "must be in [0, 1)")


@dataclass
class TrainRewardConfig:
    """conf/train_reward.yaml (``wmrl.finetune.reward_trainer.train_reward``). ``lerobot`` /
    ``trajectories`` go to their loader (``wmrl.finetune.reward_datasets``); ``task`` and
    ``env`` (the replays' settings) are checked by their groups' schemas."""

    data_dir: Any = MISSING  # one folder or a list (trajectories)
    data_format: RewardDataFormat = MISSING
    lerobot: Dict[str, Any] = MISSING
    trajectories: Dict[str, Any] = MISSING
    out_dir: str = MISSING
    overwrite: bool = MISSING  # replace an out_dir holding other files (wmrl.io.atomic)
    run_dir: str = MISSING
    ckpt_path: Optional[str] = MISSING
    arch: RewardArch = MISSING
    model: RewardModelSchema = MISSING
    tasks: Optional[List[str]] = MISSING
    steps: int = MISSING
    batch_size: int = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    gradient_clip_norm: Optional[float] = MISSING
    val_fraction: float = MISSING
    balance: bool = MISSING
    seed: int = MISSING
    device: str = MISSING
    log_every: int = MISSING
    checkpoint: CheckpointSchema = MISSING
    strategy: Dict[str, Any] = MISSING
    logger: Any = MISSING
    trainer: Dict[str, Any] = MISSING

    def __post_init__(self) -> None:
        require_positive("", self, "steps", "batch_size", "lr", "gradient_clip_norm")
        require_positive("", self, "weight_decay", "log_every", allow_zero=True)
        require("val_fraction", self.val_fraction, 0 <= self.val_fraction < 1,
                "must be in [0, 1) (the share of frames held out to score the reward)")


ENTRY_SCHEMAS = {"finetune_world_model": FinetuneWorldModelConfig,
                 "train_reward": TrainRewardConfig}


SCHEMAS = {"task": TaskSchema,  # first: the groups that interpolate it then name their own keys
           "rollout": RolloutSchema, "algorithm": AlgorithmSchema,
           "checkpoint": CheckpointSchema}
# groups whose config is a ``_target_`` spec: the schema of the settings of a known target
TARGET_SCHEMAS = {
    ("env", "wmrl.envs.wan_env.WanWorldModelEnv"): WanEnvSchema,
    ("policy", "wmrl.policies.openvla_oft.build_policy"): PolicySchema,
    ("reward", "wmrl.rewards.resnet.ResNetSuccessReward"): ResNetRewardSchema,
    ("reward", "wmrl.rewards.resnet.TaskResNetSuccessReward"): TaskResNetRewardSchema,
    ("reward", "wmrl.rewards.topreward.TOPReward"): TOPRewardSchema,
    ("pace", "wmrl.pace.round.Pace"): PaceSchema,
}

_store = ConfigStore.instance()
for _name, _schema in SCHEMAS.items():
    _store.store(group="schema", name=_name, node=_schema)


def _first_line(err: OmegaConfBaseException) -> str:
    return str(getattr(err, "msg", None) or err).strip().splitlines()[0]


def check_group(group: str, values: Any) -> None:
    """Types, choices and ranges of one group (a DictConfig or dict); raises ConfigError."""
    check_values(group, SCHEMAS[group], values)


def check_values(group: str, schema: type, values: Any) -> None:
    plain = OmegaConf.to_container(values, resolve=True) if OmegaConf.is_config(values) \
        else values
    if not isinstance(plain, dict):
        raise ConfigError(f"{group} must be a mapping of keys, got {plain!r}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), plain)
        OmegaConf.to_object(merged)  # runs __post_init__: the range checks
    except OmegaConfBaseException as err:
        key = ".".join(k for k in (group, getattr(err, "full_key", None)) if k) or "config"
        raise ConfigError(f"{key}: {_first_line(err)}") from None


def fields_of(schema: type) -> set[str]:
    return {f.name for f in fields(schema)}


def check_entry(name: str, cfg: Any) -> None:
    """The config of entry point ``name`` (``ENTRY_SCHEMAS``: conf/<name>.yaml): its own keys
    by its schema, the groups it shares with the fit (``task``, ``env``, ...) by theirs
    (``check``); raises one-line ``ConfigError``s."""
    shared = set(SCHEMAS) - set(fields_of(ENTRY_SCHEMAS[name])) | {g for g, _ in TARGET_SCHEMAS}
    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    check_values("", ENTRY_SCHEMAS[name], {k: v for k, v in plain.items() if k not in shared})
    check(cfg)


# dtype settings inside specs that have no schema of their own (a world model's keys vary
# with where it comes from): each must be a name of the dtype table, as the schemas' DType
SPEC_DTYPES = ("env.world_model.dtype", "env.world_model.vae_dtype", "world_model.dtype",
               "world_model.vae_dtype")


def check(cfg: Any) -> None:
    """Every schema'd group present in ``cfg``, the known settings of ``_target_`` specs, and
    the dtypes of ``SPEC_DTYPES``."""
    for group in SCHEMAS:
        if cfg.get(group) is not None:
            check_group(group, cfg[group])
    for (group, target), schema in TARGET_SCHEMAS.items():
        spec = cfg.get(group)
        if OmegaConf.is_dict(spec) and spec.get("_target_") == target:
            known = {f.name for f in fields(schema)}
            check_values(group, schema, {k: spec[k] for k in spec if k in known})
    for key in SPEC_DTYPES:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:
            require(key, value, value in DTYPES, f"one of {list(DTYPES)}")


def with_defaults(cfg: Any) -> Any:
    """A copy of ``cfg`` with every schema'd group merged onto its dataclass: a key the
    config leaves out takes the schema's default (the one source of defaults)."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        for group, schema in SCHEMAS.items():
            if cfg.get(group) is not None:
                plain = OmegaConf.to_container(cfg[group], resolve=True)
                merged = OmegaConf.merge(OmegaConf.structured(schema), plain)
                out[group] = OmegaConf.to_container(merged, enum_to_str=True)
    return out


def defaults(schema: type) -> dict[str, Any]:
    """A schema's defaults as plain values (for the constructors' signatures: no second
    literal)."""
    return OmegaConf.to_container(OmegaConf.structured(schema), enum_to_str=True)


# conf/rollout/default.yaml, conf/algorithm/grpo.yaml and conf/pace/default.yaml compose these
# nodes (their defaults lists): every key of the group with the schema's default as a plain
# value (a string, not an enum), so the files repeat none of them and ``<group>.<key>=...``
# overrides each without a ``+``
for _group, _schema in (("rollout", RolloutSchema), ("algorithm", AlgorithmSchema),
                       ("pace", PaceSchema)):
    _values = defaults(_schema)
    _store.store(group="schema", name=f"{_group}_defaults",
                 node={"_target_": _values.pop("_target_"), **_values})
