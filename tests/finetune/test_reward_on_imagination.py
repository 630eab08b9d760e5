"""A reward fitted to imagination (wmrl/finetune/reward_on_imagination.py): the split, the
held-out scores (hand-checked), the fine-tune of a real tiny ResNet reward, and
scripts/fit_reward_to_imagination.py on real simulator episodes replayed in a real tiny world
model."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from tiny_models import tiny_world_model

from wmrl.finetune import reward_on_imagination as R
from wmrl.finetune.reward_trainer import finetune_reward_model
from wmrl.rewards.resnet import ResNetSuccessReward, save_checkpoint
from wmrl.sim.dataset import Episode, TrajectoryDataset, TrajectoryWriter

TINY = {"widths": [4, 4, 4, 4], "blocks_per_stage": 1, "image_size": [16, 16]}


def episode(labels: list[int], task: str = "t") -> Episode:
    t = len(labels) - 1
    return Episode(np.zeros((t + 1, 4, 4, 3), np.uint8), np.zeros((t, 7), np.float32),
                   np.array(labels, bool), task)


class PixelReward:
    """Scores a frame by its first pixel: p = value / 255 (a readable stand-in scorer)."""

    def __call__(self, frames, tasks):
        return frames[..., 0, 0, 0].float() / 255


def test_split_holds_out_each_outcome():
    y = [1, 1, 0, 0, 0, 0, 0, 0]
    train, held = R.split_episodes(y, 0.25, seed=0)
    # floor(0.25 * 2 + 1/2) = 1 success, floor(0.25 * 6 + 1/2) = 2 failures held out
    assert sorted([y[i] for i in held]) == [0, 0, 1] and sorted(train + held) == list(range(8))
    assert R.split_episodes(y, 0.25, seed=0) == (train, held)  # seeded
    assert R.split_episodes(y, 0.0, seed=0) == (list(range(8)), [])
    assert R.split_episodes([1, 0], 0.9, seed=0)[0]  # the training side keeps one
    with pytest.raises(ValueError, match="holdout"):
        R.split_episodes(y, 1.0, seed=0)


def test_replay_metrics_hand_checked():
    # episode A succeeds at frame 2 (labels of frames 1..3: 0, 1, 1); B fails
    eps = [episode([0, 0, 1, 1]), episode([0, 0, 0, 0])]
    videos = [np.zeros((3, 4, 4, 3), np.uint8) for _ in eps]
    videos[0][:, 0, 0, 0] = [25, 254, 255]   # p = 0.098, 0.996, 1.0
    videos[1][:, 0, 0, 0] = [51, 254, 76]    # p = 0.2, 0.996, 0.298
    m = R.replay_metrics(PixelReward(), videos, eps, threshold=0.99)
    # frames >= 0.99: A's last two (both true), B's middle one (false): TP 2, FP 1, FN 0
    assert m["frame_precision"] == pytest.approx(2 / 3) and m["frame_recall"] == 1.0
    # AUROC over 2 positives x 4 negatives: 0.996 beats 3 and ties 1, 1.0 beats all 4
    assert m["frame_auroc"] == pytest.approx(7.5 / 8)
    # episodes: both peaks >= 0.99, only A succeeded
    assert (m["episode_precision"], m["episode_recall"], m["episode_accuracy"]) == (0.5, 1.0, 0.5)
    assert (m["episode_wm_success"], m["episode_real_success"]) == (1.0, 0.5)
    assert m["episode_auroc"] == 1.0  # A's peak 1.0 above B's 0.996
    # half the episodes succeeded: on the grid (.., 0.99, 0.995, 0.999) 0.999 lets only A's
    # peak through (1/2), 0.995 both (2/2)
    assert m["rate_matching_threshold"] == 0.999


def test_finetune_learns_the_imagined_success_look():
    """White frames are successes, black ones failures: the real tiny ResNet learns it, and
    is left frozen in eval mode."""
    torch.manual_seed(0)
    reward = ResNetSuccessReward(config=TINY, round=False, seed=0)
    frames = torch.zeros(64, 16, 16, 3, dtype=torch.uint8)
    frames[:16] = 255
    labels = torch.zeros(64)
    labels[:16] = 1
    before = reward(frames[[0, 63]][None], ["t"])[0]
    assert abs(float(before[0] - before[1])) < 0.2  # the random init cannot tell them apart
    opt = torch.optim.AdamW(reward.model.parameters(), lr=1e-2)
    losses = finetune_reward_model(reward, opt, frames, labels, ["t"] * 64, 60, 32,
                                   torch.Generator().manual_seed(0))
    assert len(losses) == 60 and np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    scores = reward(frames[[0, 63]][None], ["t"])[0]  # a white and a black frame
    assert scores[0] > 0.9 and scores[1] < 0.5 and scores[0] - scores[1] > 0.5
    assert not reward.model.training and not any(p.requires_grad
                                                 for p in reward.model.parameters())


@pytest.fixture(scope="module")
def sim_episodes(tmp_path_factory):
    """6 real simulator episodes of the scripted expert (32x32), some succeeding."""
    from wmrl.sim.episodes import EpisodeSpec, rollout_episodes
    from wmrl.sim.expert import ScriptedExpert
    from wmrl.sim.tabletop import TabletopVecEnv, task_by_name

    root = tmp_path_factory.mktemp("reward_on_imagination")
    vec = TabletopVecEnv(3, image_size=32, max_episode_steps=16)
    try:
        with TrajectoryWriter(root / "data", (32, 32), [task_by_name("red_on_plate").instruction],
                              state_dim=25) as w:
            specs = [EpisodeSpec("red_on_plate", seed=i) for i in range(6)]
            for ep in rollout_episodes(vec, ScriptedExpert(noise_std=0.3), specs):
                w.add(ep)
    finally:
        vec.close()
    tiny_world_model().save_pretrained(root / "wm")
    torch.manual_seed(0)
    save_checkpoint(ResNetSuccessReward(config=TINY, seed=0).model,
                    {"arch": "resnet", **TINY}, root / "reward")
    return root


def run_script(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/fit_reward_to_imagination.py", *overrides],
                          cwd=ROOT, capture_output=True, text=True)


def test_script_fine_tunes_a_checkpoint_on_replays(sim_episodes, tmp_path):
    """The command line ``make assets`` runs (stage 7), at tiny sizes."""
    eps = list(TrajectoryDataset(sim_episodes / "data"))
    args = [f"reward_dir={sim_episodes / 'reward'}", f"world_model_dir={sim_episodes / 'wm'}",
            f"data_dir={sim_episodes / 'data'}", f"out_dir={tmp_path / 'out'}", "steps=5",
            "lr=1e-3", "batch_size=16", "holdout=0.34", "success_threshold=0.5",
            "num_inference_steps=2"]
    out = run_script(*args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "held-out replays: episode precision" in out.stdout
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    train, held = R.split_episodes([ep.success for ep in eps], 0.34, 0)
    assert (m["episodes"], m["train_episodes"], m["held_out_episodes"]) == (6, len(train),
                                                                             len(held))
    assert len(held) > 0 and m["steps"] == 5
    # every frame of the training episodes' replays, labelled by the simulator
    assert m["train_frames"] == sum(len(eps[i]) for i in train)
    assert m["train_positive_frames"] == sum(int(eps[i].success_labels[1:].sum()) for i in train)
    assert set(m["before"]) == set(m["after"]) and 0 <= m["after"]["episode_recall"] <= 1
    # a loadable checkpoint with the source's architecture, and weights that moved
    new = ResNetSuccessReward(checkpoint=str(tmp_path / "out"))
    src = ResNetSuccessReward(checkpoint=str(sim_episodes / "reward"))
    assert any(not torch.equal(a, b) for a, b in zip(new.model.state_dict().values(),
                                                     src.model.state_dict().values()))
    with pytest.raises(FileNotFoundError, match=f"reward_dir={tmp_path}: not a reward checkpoint"):
        R.load_reward(str(tmp_path))
