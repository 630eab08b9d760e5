"""A reward from a LeRobot dataset (wmrl/finetune/reward_data.py, scripts/train_reward.py
``data_format=lerobot``): the per-frame labels by hand, then a classifier that learns them."""

import numpy as np
import pytest

from wmrl.config import compose_config
from wmrl.errors import ConfigError
from wmrl.finetune.reward_data import frame_success, reward_frames_from_lerobot
from wmrl.finetune.reward_trainer import train_reward
from wmrl.lerobot.writer import write_lerobot

T, SUCCESS_FROM = 16, 10  # frames f10..f15 of every episode show the success


def episodes(n=4, recorded=True):
    """Dark frames; from f10 on a bright square (placed by episode). ``next.success`` row t is
    the outcome of row t's action: frame t + 1's success (the last row keeps its own)."""
    for e in range(n):
        frames = np.full((T, 32, 32, 3), 30, np.uint8)
        r, c = 4 + 4 * e, 18 - 4 * e
        frames[SUCCESS_FROM:, r:r + 10, c:c + 10] = 230
        y = np.arange(T) >= SUCCESS_FROM
        after = np.concatenate([y[1:], y[-1:]])
        actions = np.zeros((T, 7), np.float32)
        yield frames, actions, "light the square", after if recorded else None, None


def test_frame_success_shifts_next_success_by_one_frame():
    assert frame_success(np.array([0, 0, 1, 1], bool)).tolist() == [False, False, False, True]


def test_labels_from_the_recorded_success_or_the_last_frames(tmp_path):
    write_lerobot(tmp_path / "rec", episodes(), fps=10)
    frames, labels, ids, tasks = reward_frames_from_lerobot(tmp_path / "rec")
    want = np.tile(np.arange(T) >= SUCCESS_FROM, 4).astype(np.uint8)
    assert frames.shape == (4 * T, 32, 32, 3) and labels.tolist() == want.tolist()
    assert tasks == ["light the square"] and set(ids.tolist()) == {0}
    # demonstrations that record no success: the last 6 frames of each are its successes
    write_lerobot(tmp_path / "demo", episodes(recorded=False), fps=10)
    _, demo_labels, _, _ = reward_frames_from_lerobot(tmp_path / "demo", last_frames=T - 10)
    assert demo_labels.tolist() == want.tolist()
    # every 4th failure frame, every success frame
    _, strided, _, _ = reward_frames_from_lerobot(tmp_path / "rec", negative_stride=4)
    assert strided.sum() == 4 * 6 and len(strided) == 4 * (6 + 3)
    with pytest.raises(ConfigError, match="records no success.*lerobot.last_frames=K"):
        reward_frames_from_lerobot(tmp_path / "demo")


def test_train_reward_learns_from_a_lerobot_dataset(tmp_path):
    write_lerobot(tmp_path / "rec", episodes(6), fps=10)
    cfg = compose_config("train_reward", [
        "data_format=lerobot", f"data_dir={tmp_path / 'rec'}", f"out_dir={tmp_path / 'ckpt'}",
        f"run_dir={tmp_path / 'run'}", "steps=60", "batch_size=32", "lr=3e-3",
        "model.widths=[4,8,8,16]", "model.image_size=[32,32]", "val_fraction=0.25",
        "log_every=0"])
    metrics = train_reward(cfg)
    assert metrics["n_eval"] == 24 and metrics["accuracy"] >= 0.9, metrics
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()
