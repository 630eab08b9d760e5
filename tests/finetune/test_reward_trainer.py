"""The one reward trainer (wmrl/finetune/reward_trainer.py) gives the numbers of the two loops
it replaced, step for step: scripts/train_reward.py's own loop (through a Lightning Trainer
now) and ``reward_on_imagination.finetune_classifier`` (PACE's and the imagination fit's,
without a Trainer); a resumed run draws the batches a straight run draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from wmrl.config import compose_config
from wmrl.finetune.reward_trainer import RewardTrainer, finetune_reward_model, train_reward
from wmrl.rewards.resnet import ResNetSuccessReward

# per-step losses of the old loops, recorded at commit 2806f2c (before the change) on the
# data below with one torch thread (a convolution's sums are ordered by the thread count, so
# the tests pin it: ``one_thread``); equal to the last bit: the same draws, the same ops in the
# same order (the loader's base seed comes from its own generator, so dropout sees the same
# global RNG)
OLD_TRAIN_REWARD = {
    "resnet": [0.8653713464736938, 1.4461121559143066, 0.96487957239151, 0.6979554891586304],
    "resnet_task": [0.7867627143859863, 0.7513166666030884, 0.7136845588684082,
                    1.0559442043304443],
}
OLD_ACCURACY = {"resnet": 10 / 12, "resnet_task": 3 / 12}
OLD_FINETUNE_CLASSIFIER = [1.106277585029602, 1.097941279411316, 0.9729458093643188,
                           0.9942248463630676, 0.8775790929794312]


def squares(root: Path, n: int = 48, size: int = 32) -> None:
    """Dark noise; every 3rd frame (a success) carries a bright 10x10 square; 2 tasks."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 60, (n, size, size, 3), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 3 == 0
    for i in torch.nonzero(labels).flatten().tolist():
        r, c = torch.randint(0, size - 10, (2,), generator=g).tolist()
        x[i, r:r + 10, c:c + 10] = 230
    root.mkdir(parents=True, exist_ok=True)
    save_file({"frames": x, "labels": labels.to(torch.uint8), "task_ids": torch.arange(n) % 2},
              str(root / "frames.safetensors"))
    (root / "tasks.json").write_text(json.dumps(["a", "b"]))


def cfg(tmp_path: Path, *overrides: str):
    return compose_config("train_reward", [
        f"data_dir={tmp_path / 'data'}", f"out_dir={tmp_path / 'out'}",
        f"run_dir={tmp_path / 'run'}", "model.widths=[4,8,8,16]", "model.image_size=[16,16]",
        "model.task_embed_dim=4", "model.fusion_hidden=8", "model.dropout=0.5", "steps=4",
        "batch_size=8", "lr=1e-2", "weight_decay=1e-4", "val_fraction=0.25", "seed=3",
        "log_every=0", *overrides])


@pytest.fixture(autouse=True)
def one_thread():
    """The threads the old loops were recorded with (the count is process-wide state)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def step_losses(monkeypatch):
    losses: list[float] = []
    step = RewardTrainer.step

    def recorded(self, batch, optimizer):
        losses.append(step(self, batch, optimizer))
        return losses[-1]

    monkeypatch.setattr(RewardTrainer, "step", recorded)
    return losses


def test_train_reward_gives_the_old_loops_losses(tmp_path, step_losses):
    squares(tmp_path / "data")
    metrics = train_reward(cfg(tmp_path, "arch=resnet"))
    assert step_losses == OLD_TRAIN_REWARD["resnet"]
    assert metrics["final_loss"] == OLD_TRAIN_REWARD["resnet"][-1]
    assert metrics["accuracy"] == pytest.approx(OLD_ACCURACY["resnet"])
    assert {"config.json", "metrics.json", "model.safetensors"} <= {
        p.name for p in (tmp_path / "out").iterdir()}
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 4


def test_dropout_too_and_a_resumed_run_ends_with_the_straight_runs_weights(tmp_path,
                                                                           step_losses):
    """arch=resnet_task (dropout 0.5: the global RNG seeded with ``seed``) gives the old loop's
    losses; 2 steps, then a resume from last.ckpt to 4 end with the same weights: batches 3
    and 4 are the straight run's (``DrawnBatches`` skips the ones the first part drew), and
    so is the dropout (the checkpoint holds the RNG's state)."""
    squares(tmp_path / "data")
    metrics = train_reward(cfg(tmp_path, "arch=resnet_task"))
    assert step_losses == OLD_TRAIN_REWARD["resnet_task"]
    assert metrics["accuracy"] == pytest.approx(OLD_ACCURACY["resnet_task"])
    straight = load_file(str(tmp_path / "out" / "model.safetensors"))
    part = tmp_path / "part"
    train_reward(cfg(tmp_path, "arch=resnet_task", "steps=2", f"run_dir={part}",
                     f"out_dir={part / 'out2'}"))
    train_reward(cfg(tmp_path, "arch=resnet_task", f"run_dir={part}", f"out_dir={part / 'out4'}",
                     f"ckpt_path={part / 'checkpoints' / 'last.ckpt'}"))
    assert step_losses[4:] == OLD_TRAIN_REWARD["resnet_task"]  # 2 + 2 steps
    resumed = load_file(str(part / "out4" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_the_fine_tune_without_a_trainer_gives_the_old_loops_losses():
    """PACE's and the imagination fit's path: eval mode, class-balanced, clipped to 1."""
    torch.manual_seed(0)
    reward = ResNetSuccessReward(config={"widths": [4, 8, 8, 16], "blocks_per_stage": 1,
                                         "image_size": [16, 16]}, round=False, seed=0)
    frames = torch.zeros(64, 16, 16, 3, dtype=torch.uint8)
    frames[:16], frames[16:32] = 255, 90
    labels = torch.zeros(64)
    labels[:16] = 1
    opt = torch.optim.AdamW(reward.model.parameters(), lr=1e-2)
    losses = finetune_reward_model(reward, opt, frames, labels, ["t"] * 64, 5, 16,
                                   torch.Generator().manual_seed(0))
    assert losses == OLD_FINETUNE_CLASSIFIER
