"""ResNet success rewards, reward evaluation utilities and scripts/train_reward.py
(wmrl.finetune.reward_trainer.train_reward)."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from toys import assert_reward_contract

from wmrl.config import compose_config
from wmrl.finetune.reward_datasets import load_reward_dataset
from wmrl.finetune.reward_evaluation import (
    binary_metrics,
    confusion_counts,
    ranking_metrics,
)
from wmrl.finetune.reward_trainer import train_reward
from wmrl.rewards.resnet import (
    TINY_CONFIG,
    ResNetClassifier,
    ResNetSuccessReward,
    TaskResNetClassifier,
    TaskResNetSuccessReward,
    frames_to_input,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = {"widths": [4, 8, 8, 16], "blocks_per_stage": 2, "image_size": [32, 32],
        "task_embed_dim": 4, "fusion_hidden": 8}
TASKS = ["open the drawer", "turn on the stove", "put the bowl on the plate"]


def frames(b=2, c=3, h=32, w=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, c, h, w, 3), dtype=torch.uint8, generator=g)


# -- architecture / checkpoint format ---------------------------------------------------
def test_real_size_key_names_match_published_checkpoints():
    sd = ResNetClassifier().state_dict()
    assert sd["net.0.0.weight"].shape == (64, 3, 7, 7) and "net.0.0.bias" in sd
    assert sd["net.0.1.running_mean"].shape == (64,)
    assert sd["net.1.0.conv1.weight"].shape == (64, 64, 3, 3)
    assert "net.1.0.conv3.weight" not in sd  # stage 1 keeps width and stride: identity
    assert sd["net.2.0.conv3.weight"].shape == (128, 64, 1, 1)  # projected shortcut
    assert "net.2.1.conv3.weight" not in sd
    assert sd["net.4.1.bn2.weight"].shape == (512,)
    assert sd["net.7.weight"].shape == (1, 512)
    assert max(int(k.split(".")[1]) for k in sd) == 7  # stem, 4 stages, pool, flatten, linear

    td = TaskResNetClassifier().state_dict()
    assert td["visual_encoder.4.1.conv2.weight"].shape == (512, 512, 3, 3)
    assert td["task_embedding.weight"].shape == (10, 64)
    assert td["fusion_layer.0.weight"].shape == (256, 576)
    assert td["fusion_layer.3.weight"].shape == (1, 256)


def test_frames_to_input_maps_uint8_to_unit_interval():
    x = frames_to_input(torch.tensor([0, 255, 51], dtype=torch.uint8).view(1, 1, 1, 3))
    assert x.shape == (1, 3, 1, 1)
    assert torch.allclose(x.flatten(), torch.tensor([-1.0, 1.0, -0.6]))
    with pytest.raises(ValueError, match="uint8"):
        frames_to_input(torch.zeros(1, 4, 4, 3))


def test_loads_reference_pth_and_scores_each_frame(tmp_path):
    torch.manual_seed(1)
    net = ResNetClassifier(**TINY).eval()
    torch.save({"model_state_dict": net.state_dict(), "epoch": 3}, tmp_path / "resnet_rm.pth")
    reward = ResNetSuccessReward(checkpoint=str(tmp_path / "resnet_rm.pth"), config=TINY,
                                 round=False)
    assert_reward_contract(reward, ["a", "b"])
    f = frames(2, 3)
    scores = reward(f, ["a", "b"])
    assert scores.shape == (2, 3) and scores.dtype == torch.float32
    with torch.no_grad():
        expected = net(frames_to_input(f.reshape(6, 32, 32, 3))).reshape(2, 3)
    torch.testing.assert_close(scores, expected)
    # each frame is scored on its own: a frame's score does not depend on its batch
    torch.testing.assert_close(reward(f[1:, 2:], ["b"]), scores[1:, 2:])
    rounded = ResNetSuccessReward(checkpoint=str(tmp_path / "resnet_rm.pth"), config=TINY)
    assert torch.equal(rounded(f, ["a", "b"]), torch.round(scores))


def test_checkpoint_that_does_not_fit_names_the_keys(tmp_path):
    save_file(ResNetClassifier(widths=[4, 8, 8, 8]).state_dict(), str(tmp_path / "m.safetensors"))
    reward = ResNetSuccessReward(checkpoint=str(tmp_path / "m.safetensors"), config=TINY)
    with pytest.raises(ValueError, match=r"net\.4\.0\.conv1\.weight"):
        reward(frames(1, 1), ["a"])
    with pytest.raises(FileNotFoundError, match="no file"):
        ResNetSuccessReward(checkpoint=str(tmp_path / "missing.pth"))(frames(1, 1), ["a"])


def test_task_reward_maps_task_strings_and_rejects_unknown():
    reward = TaskResNetSuccessReward(config=TINY, tasks=TASKS, round=False)
    assert reward.task_id("turn on the stove") == 1
    f = frames(1, 2).expand(3, 2, 32, 32, 3).contiguous()  # same frames for every env
    scores = reward(f, TASKS)
    assert scores.shape == (3, 2)
    # same frames, different tasks -> different scores; env order follows the task strings
    assert not torch.allclose(scores[0], scores[1])
    torch.testing.assert_close(reward(f[:2], [TASKS[2], TASKS[0]]), scores[[2, 0]])
    with pytest.raises(ValueError, match="not in reward.tasks"):
        reward(f[:1], ["make coffee"])
    with pytest.raises(ValueError, match="config.num_tasks"):
        TaskResNetSuccessReward(config={**TINY, "num_tasks": 2}, tasks=TASKS)


def test_pickles_without_weights_and_rebuilds_identically():
    reward = ResNetSuccessReward(config=TINY_CONFIG, round=False, seed=3)
    assert not reward.is_built
    f = frames(2, 2, 64, 64)
    scores = reward(f, ["a", "b"])
    blob = pickle.dumps(reward)
    assert len(blob) < 4096  # arguments only: the built model is dropped
    clone = pickle.loads(blob)
    assert not clone.is_built
    torch.testing.assert_close(clone(f, ["a", "b"]), scores)
    reward.offload()
    assert next(reward.model.parameters()).device.type == "cpu"
    reward.onload()
    assert reward.to("cpu") is reward
    torch.testing.assert_close(reward(f, ["a", "b"]), scores)


# -- evaluation utilities ---------------------------------------------------------------
def test_confusion_counts_by_hand():
    # pairs (pred, label): (1,1) (1,0) (0,0) (0,1) (1,1) -> tp 2, fp 1, tn 1, fn 1
    pred, label = np.array([1, 1, 0, 0, 1], bool), np.array([1, 0, 0, 1, 1], bool)
    assert confusion_counts(pred, label) == (2, 1, 1, 1)
    assert confusion_counts(torch.from_numpy(pred).long(), torch.from_numpy(label)) == (2, 1, 1, 1)
    assert confusion_counts(np.zeros(0, bool), np.zeros(0, bool)) == (0, 0, 0, 0)


def test_binary_metrics_by_hand():
    m = binary_metrics(torch.tensor([0.9, 0.8, 0.2, 0.6]), torch.tensor([1, 0, 0, 1]))
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (2, 1, 0, 1)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == 1.0
    assert m["f1"] == pytest.approx(0.8) and m["accuracy"] == 0.75
    assert binary_metrics(torch.zeros(3), torch.zeros(3))["f1"] == 0.0
    # AUROC: of the 4 (positive, negative) pairs, 0.6 < 0.8 is the one ranked wrong -> 3/4;
    # ECE, one score per bin: (|0.9-1| + |0.8-0| + |0.2-0| + |0.6-1|) / 4 = 0.375
    r = ranking_metrics(torch.tensor([0.9, 0.8, 0.2, 0.6]), torch.tensor([1, 0, 0, 1]))
    assert r["auroc"] == pytest.approx(0.75) and r["ece"] == pytest.approx(0.375)
    assert math.isnan(ranking_metrics(torch.ones(3), torch.ones(3))["auroc"])


# -- training script --------------------------------------------------------------------
def reward_cfg(tmp_path: Path, *overrides: str):
    """conf/train_reward.yaml on ``tmp_path/data`` -> ``tmp_path/ckpt`` (run dir
    ``tmp_path/run``), with ``overrides``."""
    return compose_config("train_reward", [
        f"data_dir={tmp_path / 'data'}", f"out_dir={tmp_path / 'ckpt'}",
        f"run_dir={tmp_path / 'run'}", "log_every=0", *overrides])


def square_dataset(root: Path, n=192, size=32, seed=0, with_tasks=False):
    """Dark noise; success frames carry a bright 10x10 square at a random place."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 60, (n, size, size, 3), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 2
    for i in torch.nonzero(labels).flatten().tolist():
        r, c = torch.randint(0, size - 10, (2,), generator=g).tolist()
        x[i, r:r + 10, c:c + 10] = 230
    tensors = {"frames": x, "labels": labels.to(torch.uint8)}
    root.mkdir(parents=True, exist_ok=True)
    if with_tasks:
        tensors["task_ids"] = torch.arange(n) % len(TASKS)
        (root / "tasks.json").write_text(json.dumps(TASKS))
    save_file(tensors, str(root / "frames.safetensors"))
    return x, labels


def test_train_reward_learns_bright_square_and_checkpoint_loads(tmp_path):
    x, labels = square_dataset(tmp_path / "data")
    metrics = train_reward(reward_cfg(tmp_path, "steps=60", "batch_size=32", "lr=3e-3",
                                      "model.widths=[4,8,8,16]", "model.image_size=[32,32]",
                                      "val_fraction=0.25"))
    assert metrics["split"] == "val" and metrics["n_eval"] == 48
    assert metrics["accuracy"] >= 0.9, metrics
    saved = json.loads((tmp_path / "ckpt/config.json").read_text())
    assert saved["arch"] == "resnet" and saved["widths"] == [4, 8, 8, 16]
    # the checkpoint dir's config wins over the (default, real-size) reward config
    reward = ResNetSuccessReward(checkpoint=str(tmp_path / "ckpt"))
    scores = reward(x[:64].view(8, 8, 32, 32, 3), ["t"] * 8)
    assert set(scores.unique().tolist()) <= {0.0, 1.0}
    assert (scores.flatten() == labels[:64]).float().mean() >= 0.9


def test_train_reward_on_one_thread_survives(tmp_path):
    """One torch thread (what the world-model stage used to leave behind, and Ray's default in
    an actor): torch 2.13's oneDNN conv backward on channels-last frames corrupted the heap
    on AVX2 CPUs and killed the process; train_reward feeds contiguous NCHW batches."""
    import subprocess
    import sys

    square_dataset(tmp_path / "data")
    code = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from wmrl.config import compose_config\n"
        "from wmrl.finetune.reward_trainer import train_reward\n"
        f"cfg = compose_config('train_reward', ['data_dir={tmp_path / 'data'}', "
        f"'out_dir={tmp_path / 'ckpt'}', 'run_dir={tmp_path / 'run'}', "
        "'model.widths=[4,8,8,16]', 'model.image_size=[32,32]', 'steps=60', 'batch_size=32', "
        "'lr=3e-3', 'weight_decay=0.0', 'val_fraction=0.25', 'log_every=0'])\n"
        "print(json.dumps(train_reward(cfg)))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["accuracy"] >= 0.9


def test_train_task_reward_roundtrip_and_bad_dataset(tmp_path):
    x, _ = square_dataset(tmp_path / "data", n=48, with_tasks=True)
    tiny = [f"model.{k}={v}".replace(" ", "") for k, v in TINY.items()]
    train_reward(reward_cfg(tmp_path, "arch=resnet_task", *tiny, "steps=2", "batch_size=8",
                            "lr=1e-3", "weight_decay=0.0", "val_fraction=0.0"))
    reward = TaskResNetSuccessReward(checkpoint=str(tmp_path / "ckpt"), round=False)
    scores = reward(x[:6].view(3, 2, 32, 32, 3), TASKS)
    assert reward.tasks == TASKS and scores.shape == (3, 2)
    with pytest.raises(ValueError, match="differs from the task list"):
        TaskResNetSuccessReward(checkpoint=str(tmp_path / "ckpt"), tasks=TASKS[::-1])(
            x[:2].view(1, 2, 32, 32, 3), TASKS[:1])
    with pytest.raises(FileNotFoundError, match="frames.safetensors"):
        load_reward_dataset(tmp_path)


def test_reward_configs_instantiate_lazily():
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(ROOT / "conf/reward"), version_base="1.3"):
        for name in ("resnet", "resnet_task", "topreward"):
            reward = instantiate(compose(name))
            assert not reward.is_built
            pickle.loads(pickle.dumps(reward))
            # builds it: tasks of the task-conditioned reward's list, 64 px for the VLM's patches
            assert_reward_contract(reward, getattr(reward, "tasks", TASKS)[:2], height=64)
    assert reward.window == 16 and reward.threshold == 0.46
