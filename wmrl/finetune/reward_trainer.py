"""The one reward trainer: a success classifier (``wmrl.rewards.resnet``) fitted by
class-balanced BCE on logits z,

    L = -mean[w y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))],   w = n_neg / n_pos,

one AdamW step per batch of ``batch_size`` frames drawn uniformly with replacement from one
``torch.Generator`` (``draw_batches``), the gradient's global norm clipped to
``gradient_clip_norm`` (None: not clipped). ``network_mode``: ``train`` (BatchNorm batch
statistics and dropout: a reward trained from scratch, whose BatchNorm statistics are then
re-estimated, ``recalibrate_batchnorm``) or ``eval`` (running statistics kept, no dropout: a
fine-tune on a few small batches would skew them).

Used by scripts/train_reward.py through the one trainer set-up (``train_reward``: a Lightning
fit, checkpoints, SIGTERM -> ``last.ckpt`` + exit 143), and without a Trainer, on their own
batches, by PACE (``Pace.finetune_reward``) and the reward fitted to imagination
(``reward_on_imagination``): ``finetune_reward_model``. Each keeps its clipping:
``gradient_clip_norm: null`` in conf/train_reward.yaml, 1.0 for the fine-tunes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from wmrl.build import to_container
from wmrl.config import resolve_ckpt_path
from wmrl.finetune.reward_datasets import load_frames
from wmrl.finetune.reward_evaluation import binary_metrics
from wmrl.finetune.update import optimizer_step
from wmrl.io.atomic import check_output_dir, write_text
from wmrl.launch.trainer import build_trainer, start_run, stop_on_sigterm
from wmrl.rewards.resnet import build_classifier, save_checkpoint, training_input
from wmrl.schema import check_entry

NETWORK_MODES = ("train", "eval")


def draw_batches(index: torch.Tensor, batch_size: int, generator: torch.Generator
                 ) -> Iterator[torch.Tensor]:
    """Endless batches of ``index``'s entries: ``min(batch_size, len(index))`` uniform draws
    with replacement from ``generator`` each."""
    size = (min(batch_size, index.numel()),)
    while True:
        yield index[torch.randint(index.numel(), size, generator=generator)]


def balance_weight(labels: torch.Tensor) -> float:
    """w = n_neg / max(n_pos, 1) of 0/1 ``labels``."""
    pos = float(labels.sum())
    return (labels.numel() - pos) / max(pos, 1.0)


class RewardTrainer(L.LightningModule):
    """Trains ``classifier`` (``logits(x, task_ids)``) on batches ``{"frames": uint8
    [B, H, W, 3], "labels": float [B], "task_ids": long [B] | None}`` (module docstring);
    ``pos_weight``: w of the loss (1: unweighted)."""

    def __init__(self, classifier: torch.nn.Module, pos_weight: float = 1.0,
                 image_size: list[int] | None = None, lr: float = 1e-3,
                 weight_decay: float = 0.0, gradient_clip_norm: float | None = None,
                 network_mode: str = "train", log_every: int = 0) -> None:
        super().__init__()
        if network_mode not in NETWORK_MODES:
            raise ValueError(f"network_mode={network_mode!r}: one of {list(NETWORK_MODES)}")
        self.automatic_optimization = False  # one step for both paths: ``step``
        self.classifier = classifier
        self.pos_weight, self.image_size = float(pos_weight), image_size
        self.lr, self.weight_decay = lr, weight_decay
        self.gradient_clip_norm, self.network_mode = gradient_clip_norm, network_mode
        self.log_every = log_every
        self.losses: list[float] = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.classifier.parameters(), lr=self.lr,
                                 weight_decay=self.weight_decay)

    def loss(self, batch: dict) -> torch.Tensor:
        dev = next(self.classifier.parameters()).device
        x = training_input(batch["frames"], self.image_size, dev)
        t = None if batch.get("task_ids") is None else batch["task_ids"].to(dev)
        return F.binary_cross_entropy_with_logits(
            self.classifier.logits(x, t), batch["labels"].to(dev),
            pos_weight=torch.tensor(self.pos_weight, device=dev))

    def step(self, batch: dict, optimizer: torch.optim.Optimizer) -> float:
        """One optimizer step on ``batch`` (with or without a Trainer); the loss."""
        self.classifier.train(self.network_mode == "train")
        backward = self.manual_backward if self._trainer is not None else None
        loss = optimizer_step(optimizer, self.loss(batch), self.classifier.parameters(),
                              self.gradient_clip_norm, backward=backward)
        self.losses.append(loss)
        return loss

    def fit_steps(self, optimizer: torch.optim.Optimizer, data: dict, steps: int,
                  batch_size: int, generator: torch.Generator) -> list[float]:
        """``steps`` steps without a Trainer on batches of ``data`` (``{"frames", "labels",
        "task_ids"}`` over all N frames) drawn from ``generator``; the loss per step. The
        classifier is left frozen in eval mode."""
        batches = draw_batches(torch.arange(len(data["labels"])), batch_size, generator)
        self.classifier.requires_grad_(True)
        try:
            return [self.step(select(data, next(batches)), optimizer) for _ in range(steps)]
        finally:
            self.classifier.eval().requires_grad_(False)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["torch_rng_state"] = torch.get_rng_state()  # dropout's: a resume goes on

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            torch.set_rng_state(checkpoint["torch_rng_state"])

    def training_step(self, batch: dict, batch_idx: int) -> None:
        loss = self.step(batch, self.optimizers())
        self.log("train/loss", loss, prog_bar=True)
        if self.log_every and (self.global_step % self.log_every == 0):  # after the step
            print(f"step {self.global_step} loss {loss:.4f}", flush=True)


def finetune_reward_model(reward, optimizer: torch.optim.Optimizer, frames: torch.Tensor,
                          labels: torch.Tensor, tasks: Sequence[str], steps: int,
                          batch_size: int, generator: torch.Generator,
                          gradient_clip_norm: float | None = 1.0) -> list[float]:
    """``steps`` steps without a Trainer (``RewardTrainer.fit_steps``, ``network_mode=eval``,
    class-balanced) of a reward model's classifier (``reward.model``: a ResNet reward of
    ``wmrl.rewards.resnet``) on ``frames`` (uint8 [N, H, W, 3]) with ``labels`` (float [N])
    and per-frame ``tasks``; the loss per step."""
    trainer = RewardTrainer(reward.model, balance_weight(labels), reward.config.get("image_size"),
                            gradient_clip_norm=gradient_clip_norm, network_mode="eval")
    data = {"frames": frames, "labels": labels,
            "task_ids": reward.task_ids(list(tasks), len(tasks))}  # None: task-free
    return trainer.fit_steps(optimizer, data, steps, batch_size, generator)


def select(data: dict, idx: torch.Tensor) -> dict:
    """The batch of ``data``'s rows ``idx``."""
    t = data.get("task_ids")
    return {"frames": data["frames"][idx], "labels": data["labels"][idx],
            "task_ids": None if t is None else t[idx]}


class DrawnBatches(IterableDataset):
    """``draw_batches`` of ``index`` as a stream for a Trainer: a copy of ``generator`` (its
    state after the train/val split), the first ``skip`` batches (a resumed run's) drawn and
    dropped, so a resume sees the batches a straight run would."""

    def __init__(self, data: dict, index: torch.Tensor, batch_size: int,
                 generator: torch.Generator, skip: int = 0) -> None:
        self.data, self.index, self.batch_size = data, index, batch_size
        self.state, self.skip = generator.get_state(), skip

    def __iter__(self):
        gen = torch.Generator().set_state(self.state)
        batches = draw_batches(self.index, self.batch_size, gen)
        for _ in range(self.skip):
            next(batches)
        for idx in batches:
            yield select(self.data, idx)


class RewardData(L.LightningDataModule):
    def __init__(self, data: dict, index: torch.Tensor, batch_size: int,
                 generator: torch.Generator) -> None:
        super().__init__()
        self.data, self.index, self.batch_size, self.generator = data, index, batch_size, generator

    def train_dataloader(self) -> DataLoader:
        skip = self.trainer.global_step if self.trainer is not None else 0  # (restored first)
        # its own generator for the loader's base seed: the global RNG is the dropout's
        return DataLoader(DrawnBatches(self.data, self.index, self.batch_size, self.generator,
                                       skip), batch_size=None, generator=torch.Generator())


@torch.no_grad()
def recalibrate_batchnorm(model: torch.nn.Module, batches: list) -> None:
    """Re-estimate BatchNorm running stats as a plain average over ``batches`` of training
    data (momentum None): after a short run the EMA (momentum 0.1) still lags the weights,
    which makes eval-mode scores disagree with what training saw."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for x, t in batches:
        model(x, t)
    for m in norms:
        m.momentum = 0.1


def train_reward(cfg) -> dict:
    """scripts/train_reward.py (conf/train_reward.yaml): check the config (``ckpt_path=last``
    resolved) and ``out_dir``, load the frames, fit (one trainer set-up), re-estimate
    BatchNorm, score a held-out split, save ``out_dir/{model.safetensors, config.json,
    metrics.json}`` (each atomically); returns the metrics."""
    check_entry("train_reward", resolve_ckpt_path(cfg))  # before any data or model loads
    check_output_dir(cfg.out_dir, "reward", cfg.overwrite, key="out_dir")
    run = to_container(cfg)
    data = load_frames(run)
    arch, model_cfg = run["arch"], dict(run["model"])
    tasks = list(run.get("tasks") or data["tasks"] or [])
    if arch == "resnet_task":
        if data["task_ids"] is None or not tasks:
            raise ValueError("arch=resnet_task needs 'task_ids' in frames.safetensors and a task "
                             "list (tasks=[...] or tasks.json)")
        if int(data["task_ids"].max()) >= len(tasks):
            raise ValueError(f"task_ids reach {int(data['task_ids'].max())} but only "
                             f"{len(tasks)} tasks are listed")
        model_cfg["num_tasks"] = max(int(model_cfg.get("num_tasks", 10)), len(tasks))

    start_run(int(run["seed"]))
    gen = torch.Generator().manual_seed(int(run["seed"]))  # the split, then the batches
    n = data["frames"].shape[0]
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(n * float(run["val_fraction"])))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    if train_idx.numel() == 0:
        raise ValueError(f"val_fraction={run['val_fraction']} leaves no training frames (N={n})")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(run["seed"]))
        classifier = build_classifier(arch, model_cfg)
    labels = data["labels"]
    module = RewardTrainer(
        classifier, balance_weight(labels[train_idx]) if run["balance"] else 1.0,
        model_cfg.get("image_size"), lr=float(run["lr"]), weight_decay=float(run["weight_decay"]),
        gradient_clip_norm=run["gradient_clip_norm"], log_every=int(run["log_every"]))
    bs = int(run["batch_size"])
    trainer = build_trainer(run, script="scripts/train_reward.py")
    with stop_on_sigterm(trainer):
        trainer.fit(module, datamodule=RewardData(data, train_idx, bs, gen),
                    ckpt_path=run["ckpt_path"], weights_only=True)

    device = next(classifier.parameters()).device
    def inputs(idx: torch.Tensor):  # noqa: E306
        t = None if data["task_ids"] is None else data["task_ids"][idx].to(device)
        return training_input(data["frames"][idx], model_cfg.get("image_size"), device), t

    recalibrate_batchnorm(classifier, [inputs(train_idx[i:i + bs])
                                       for i in range(0, min(train_idx.numel(), 16 * bs), bs)])
    classifier.eval()
    eval_idx = val_idx if n_val else train_idx
    with torch.no_grad():
        scores = torch.cat([classifier(*inputs(eval_idx[i:i + 256])).cpu()
                            for i in range(0, eval_idx.numel(), 256)])
    metrics = {"split": "val" if n_val else "train", "n_train": int(train_idx.numel()),
               "n_eval": int(eval_idx.numel()),
               "final_loss": module.losses[-1] if module.losses else None,
               **binary_metrics(scores, labels[eval_idx])}
    config = {"arch": arch, **model_cfg, "tasks": tasks if arch == "resnet_task" else None}
    out = save_checkpoint(classifier, config, run["out_dir"])
    write_text(str(Path(out) / "metrics.json"), json.dumps(metrics, indent=2))
    return metrics
