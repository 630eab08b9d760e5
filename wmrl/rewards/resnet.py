"""ResNet-18-shaped success classifiers: the reward models of the Wan LIBERO world models.

Architecture (widths ``w = [64, 128, 256, 512]`` for the published checkpoints)::

    stem   Conv7x7/2 (3->w0, bias) - BN - ReLU - MaxPool3x3/2
    stage  2 basic blocks per stage; the first block of stages 2-4 halves the resolution
           and projects the shortcut with a 1x1/2 conv (``conv3``); convs carry biases
    head   global average pool - Linear(w3 -> 1) - Sigmoid              (ResNetClassifier)
    head   [GAP features (w3) ; Embedding(num_tasks, 64)] - Linear(w3+64 -> 256) - ReLU
           - Dropout(0.1) - Linear(256 -> 1) - Sigmoid                  (TaskResNetClassifier)

Parameter names follow the released checkpoints (``net.0.0.weight``, ``net.1.0.conv1.weight``,
``net.7.weight`` / ``visual_encoder.*``, ``task_embedding.weight``, ``fusion_layer.{0,3}.*``),
so those state dicts load by key. Input: RGB in [-1, 1] (``x = 2 * u8 / 255 - 1``), channels
first, at the generated resolution (256x256 for the Wan LIBERO models; no resize).

Checkpoints: a ``.pth``/``.pt`` state dict (optionally under ``model_state_dict``, loaded with
``weights_only=True``), a ``.safetensors`` file, or a directory with ``model.safetensors`` +
``config.json`` (what ``scripts/train_reward.py`` writes; its config overrides ``config``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from wmrl.io.atomic import atomic_path, mark_output_dir
from wmrl.io.pixels import u8_to_unit_torch
from wmrl.rewards.base import LazyRewardModel, seeded_init

REAL_CONFIG: dict[str, Any] = {
    "widths": [64, 128, 256, 512],
    "blocks_per_stage": 2,
    "image_size": None,  # None: score frames at their own resolution
    "num_tasks": 10,
    "task_embed_dim": 64,
    "fusion_hidden": 256,
    "dropout": 0.1,
}
TINY_CONFIG: dict[str, Any] = {**REAL_CONFIG, "widths": [8, 16, 32, 64], "task_embed_dim": 8,
                               "fusion_hidden": 16, "image_size": [64, 64]}


class BasicBlock(nn.Module):
    """y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); shortcut = conv3 (1x1) when
    the block changes width or stride, else identity."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(c_out, c_out, kernel_size=3, padding=1)
        project = stride != 1 or c_in != c_out
        self.conv3 = nn.Conv2d(c_in, c_out, kernel_size=1, stride=stride) if project else None
        self.bn1 = nn.BatchNorm2d(c_out)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def resnet_trunk(widths: Sequence[int], blocks_per_stage: int) -> list[nn.Module]:
    """Stem + one ``nn.Sequential`` of basic blocks per stage (5 modules for 4 widths)."""
    if len(widths) < 1 or blocks_per_stage < 1:
        raise ValueError(f"reward config: need >= 1 width and block, got widths={widths}, "
                         f"blocks_per_stage={blocks_per_stage}")
    stem = nn.Sequential(
        nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3),
        nn.BatchNorm2d(widths[0]),
        nn.ReLU(),
        nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
    )
    stages, c_in = [], widths[0]
    for i, c_out in enumerate(widths):
        blocks = [BasicBlock(c_in, c_out, stride=1 if i == 0 else 2)]
        blocks += [BasicBlock(c_out, c_out) for _ in range(blocks_per_stage - 1)]
        stages.append(nn.Sequential(*blocks))
        c_in = c_out
    return [stem, *stages]


class ResNetClassifier(nn.Module):
    """p(success | frame) = sigmoid(Linear(GAP(trunk(x))))."""

    def __init__(self, widths: Sequence[int] = (64, 128, 256, 512), blocks_per_stage: int = 2,
                 **_: Any) -> None:
        super().__init__()
        self.net = nn.Sequential(
            *resnet_trunk(widths, blocks_per_stage),
            nn.AdaptiveAvgPool2d((1, 1)),
            nn.Flatten(),
            nn.Linear(widths[-1], 1),
            nn.Sigmoid(),
        )

    def logits(self, x: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.net[:-1](x).squeeze(-1)

    def forward(self, x: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sigmoid(self.logits(x))


class TaskResNetClassifier(nn.Module):
    """p(success | frame, task) = sigmoid(MLP([GAP(trunk(x)); Embedding(task)]))."""

    def __init__(self, widths: Sequence[int] = (64, 128, 256, 512), blocks_per_stage: int = 2,
                 num_tasks: int = 10, task_embed_dim: int = 64, fusion_hidden: int = 256,
                 dropout: float = 0.1, **_: Any) -> None:
        super().__init__()
        self.visual_encoder = nn.Sequential(
            *resnet_trunk(widths, blocks_per_stage), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten()
        )
        self.task_embedding = nn.Embedding(num_tasks, task_embed_dim)
        self.fusion_layer = nn.Sequential(
            nn.Linear(widths[-1] + task_embed_dim, fusion_hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(fusion_hidden, 1),
            nn.Sigmoid(),
        )

    def logits(self, x: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        if task_ids is None:
            raise ValueError("TaskResNetClassifier needs task_ids")
        features = torch.cat([self.visual_encoder(x), self.task_embedding(task_ids)], dim=1)
        return self.fusion_layer[:-1](features).squeeze(-1)

    def forward(self, x: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sigmoid(self.logits(x, task_ids))


ARCHS = {"resnet": ResNetClassifier, "resnet_task": TaskResNetClassifier}


# -- frames -> model input ---------------------------------------------------------------
def frames_to_input(frames: torch.Tensor, image_size: Sequence[int] | None = None) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> float [N, 3, H', W'] in [-1, 1] (x = 2 u / 255 - 1), resized
    (bilinear, antialiased) only when ``image_size`` is set and differs."""
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"reward frames: expected uint8 [N, H, W, 3], got {frames.dtype} "
                         f"{tuple(frames.shape)}")
    x = u8_to_unit_torch(frames.permute(0, 3, 1, 2))
    if image_size is not None and tuple(x.shape[-2:]) != tuple(image_size):
        x = F.interpolate(x, size=tuple(image_size), mode="bilinear", align_corners=False,
                          antialias=True).clamp_(-1.0, 1.0)
    return x


def training_input(frames: torch.Tensor, image_size: Sequence[int] | None = None,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """``frames_to_input`` for a batch that will be back-propagated through, on ``device``, in
    contiguous NCHW: torch 2.13's oneDNN conv backward on the channels-last view the HWC frames
    permute to corrupts the heap with one thread on AVX2 (AMD EPYC) CPUs. Scoring keeps
    ``frames_to_input`` (a copy would move scores by ~6e-7)."""
    return frames_to_input(frames, image_size).to(device).contiguous()


# -- checkpoints -------------------------------------------------------------------------
def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a ``.pth``/``.pt`` pickle (``weights_only``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"reward checkpoint: no file at {path}")
    if path.suffix == ".safetensors":
        return load_file(str(path))
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - re-raised with what to do
        raise ValueError(f"reward checkpoint {path}: not loadable with weights_only=True ({err}); "
                         "re-save it as a plain state dict or safetensors") from err
    if isinstance(obj, dict) and "model_state_dict" in obj:
        obj = obj["model_state_dict"]
    if not isinstance(obj, dict):
        raise ValueError(f"reward checkpoint {path}: expected a state dict, got {type(obj)}")
    return obj


def read_checkpoint(checkpoint: str | Path) -> tuple[dict[str, torch.Tensor], dict | None]:
    """(state_dict, config or None) from a directory, a safetensors file or a .pth file."""
    path = Path(checkpoint)
    if path.is_dir():
        weights, config = path / "model.safetensors", path / "config.json"
        if not weights.is_file():
            raise FileNotFoundError(f"reward checkpoint dir {path}: missing model.safetensors")
        cfg = json.loads(config.read_text()) if config.is_file() else None
        return load_file(str(weights)), cfg
    return load_state_dict_file(path), None


def save_checkpoint(model: nn.Module, config: dict, out_dir: str | Path) -> Path:
    """Write ``model.safetensors`` + ``config.json`` into ``out_dir`` atomically (each file is
    written to a temp name in the same directory, then ``os.replace``d), and mark the folder a
    reward's (``wmrl.io.atomic.mark_output_dir``: the scripts replace only their own output)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for name, write in (
        ("model.safetensors", lambda p: save_file(state, p)),
        ("config.json", lambda p: Path(p).write_text(json.dumps(config, indent=2))),
    ):
        with atomic_path(out / name) as tmp:
            write(tmp)
    mark_output_dir(out, "reward", ["model.safetensors", "config.json"])
    return out


def build_classifier(arch: str, config: dict) -> nn.Module:
    if arch not in ARCHS:
        raise ValueError(f"reward config: unknown arch {arch!r}; choose one of {sorted(ARCHS)}")
    return ARCHS[arch](**config)


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Strict load with an error that names the mismatching keys / shapes."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: ckpt {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        raise ValueError(
            f"reward checkpoint {source} does not fit the configured model "
            f"(check reward.config widths / blocks_per_stage / num_tasks): "
            f"missing={missing[:5]} unexpected={unexpected[:5]} shape={shapes[:5]}"
        )
    model.load_state_dict(state)


# -- the reward models -------------------------------------------------------------------
class ResNetSuccessReward(LazyRewardModel):
    """Scores every frame with a ResNet success classifier.

    ``reward(frames uint8 [B, C, H, W, 3], tasks) -> float [B, C]`` in [0, 1]:
    p(success) per frame, or ``round(p)`` in {0, 1} when ``round`` (the reference setting).
    ``checkpoint=None`` gives a seeded random init (tests, the default CPU run).
    """

    arch = "resnet"

    def __init__(self, checkpoint: str | None = None, config: dict | None = None,
                 round: bool = True, device: str = "cpu",
                 seed: int = 0,
                 batch_size: int = 256) -> None:
        super().__init__(device)
        self.checkpoint = None if checkpoint is None else str(checkpoint)
        self.config = {**REAL_CONFIG, **(dict(config) if config else {})}
        self.round = bool(round)
        self.seed = int(seed)
        self.batch_size = int(batch_size)

    def _build(self) -> nn.Module:
        state = None
        if self.checkpoint is not None:
            state, ckpt_config = read_checkpoint(self.checkpoint)
            if ckpt_config is not None:
                if ckpt_config.get("arch", self.arch) != self.arch:
                    raise ValueError(f"reward checkpoint {self.checkpoint} is arch "
                                     f"{ckpt_config['arch']!r}, this reward needs {self.arch!r}")
                self._adopt_checkpoint_config(ckpt_config)
        model = seeded_init(lambda: build_classifier(self.arch, self.config), self.seed)
        if state is not None:
            load_weights(model, state, self.checkpoint)
        return model

    def _adopt_checkpoint_config(self, ckpt_config: dict) -> None:
        self.config = {**self.config, **{k: v for k, v in ckpt_config.items()
                                         if k in REAL_CONFIG}}

    def task_ids(self, tasks: Sequence[str], batch: int) -> torch.Tensor | None:
        """The classifier's task input for ``batch`` task strings: the embedding row of each
        (long [batch]), or None for a task-free classifier (this one)."""
        return None

    @torch.no_grad()
    def __call__(self, frames: torch.Tensor, tasks: Sequence[str] | None = None,
                 env_ids: Sequence[int] | None = None) -> torch.Tensor:
        """Scores [B, C]; ``env_ids`` is accepted for symmetry with stateful rewards (unused:
        every frame is scored on its own)."""
        if frames.ndim != 5:
            raise ValueError(f"reward frames: expected uint8 [B, C, H, W, 3], got "
                             f"{tuple(frames.shape)}")
        b, c = frames.shape[:2]
        model = self.model
        task_ids = self.task_ids(tasks or [], b)
        flat = frames.reshape(b * c, *frames.shape[2:])
        frame_tasks = None if task_ids is None else task_ids.repeat_interleave(c)
        out = []
        for i in range(0, b * c, self.batch_size):
            x = frames_to_input(flat[i:i + self.batch_size].to(self.device),
                                self.config.get("image_size"))
            t = None if frame_tasks is None else frame_tasks[i:i + self.batch_size].to(self.device)
            out.append(model(x, t).float())
        scores = torch.cat(out).reshape(b, c)
        return torch.round(scores) if self.round else scores


class TaskResNetSuccessReward(ResNetSuccessReward):
    """Task-conditioned ResNet reward for suites where one scene holds several tasks.

    ``tasks`` (the config list) maps a task string to its embedding row: ``tasks[i] -> i``.
    An env task not in the list is an error (the embedding would be meaningless).
    """

    arch = "resnet_task"

    def __init__(self, checkpoint: str | None = None, config: dict | None = None,
                 tasks: Sequence[str] | None = None, round: bool = True,
                 device: str = "cpu", seed: int = 0,
                 batch_size: int = 256) -> None:
        super().__init__(checkpoint, config, round, device, seed, batch_size)
        self.tasks = [str(t) for t in tasks] if tasks else []
        self._check_tasks()

    def _check_tasks(self) -> None:
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError("reward.tasks: duplicate task strings")
        if len(self.tasks) > self.config["num_tasks"]:
            raise ValueError(f"reward.tasks has {len(self.tasks)} tasks but config.num_tasks is "
                             f"{self.config['num_tasks']}")

    def _adopt_checkpoint_config(self, ckpt_config: dict) -> None:
        super()._adopt_checkpoint_config(ckpt_config)
        if ckpt_config.get("tasks"):
            if self.tasks and self.tasks != list(ckpt_config["tasks"]):
                raise ValueError(f"reward.tasks differs from the task list stored in "
                                 f"{self.checkpoint}/config.json; drop reward.tasks or fix it")
            self.tasks = list(ckpt_config["tasks"])
        self._check_tasks()

    def task_id(self, task: str) -> int:
        try:
            return self.tasks.index(task.strip())
        except ValueError:
            raise ValueError(f"task {task!r} is not in reward.tasks ({len(self.tasks)} known: "
                             f"{self.tasks[:3]}...); add it to the reward config") from None

    def task_ids(self, tasks: Sequence[str], batch: int) -> torch.Tensor:
        self.model  # noqa: B018 - builds the model, which may adopt the checkpoint's task list
        if len(tasks) != batch:
            raise ValueError(f"reward: got {len(tasks)} task strings for {batch} envs")
        return torch.tensor([self.task_id(t) for t in tasks], dtype=torch.long)
