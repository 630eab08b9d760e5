"""The closed-loop threshold read: imagined peaks equal a hand-run loop of the same env, the
threshold sweep by hand, and the calibration (``wmrl.eval.success_threshold``,
scripts/calibrate_threshold.py) end to end on the shipped assets."""

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import CONF_DIR
from omegaconf import OmegaConf

from wmrl.config import ConfigError
from wmrl.envs.initial_states import synthetic_initial_states
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.eval.success_threshold import calibrate
from wmrl.finetune.threshold_calibration import (
    imagined_peaks,
    rate_matching_threshold,
    success_by_threshold,
)

CFG = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF_DIR, "env", "wan_tiny.yaml")),
                             resolve=False)
WORLD_MODEL = {k: v for k, v in CFG["world_model"].items() if k != "path"}


class Brightness:
    def __call__(self, frames: torch.Tensor, tasks: list[str]) -> torch.Tensor:
        return frames.float().mean(dim=(2, 3, 4)) / 255.0


class ImageMeanActions:
    """An action source that reads the frames it is shown: every action is the image's mean
    pixel / 255 * 2 - 1, so a closed loop differs from an open one."""

    def __init__(self):
        self.calls = 0

    def sample(self, obs, temperature, generator=None):
        self.calls += 1
        m = obs["image"].float().mean(dim=(1, 2, 3)) / 255.0 * 2 - 1
        return SimpleNamespace(actions=m[:, None, None].expand(-1, 8, 7).clone())


def make_env(states):
    return WanWorldModelEnv(world_model=WORLD_MODEL, reward=Brightness(), initial_states=states,
                            num_envs=4, group_size=1, max_episode_steps=24, seed=0,
                            success_threshold=0.5)


def test_imagined_peaks_are_the_closed_loop_peaks_by_hand():
    states = synthetic_initial_states(5, 32, 32, num_tasks=1, seed=3)
    policy = ImageMeanActions()
    peaks = imagined_peaks(make_env(states), policy, [0, 1, 2, 3, 4])
    assert peaks.shape == (5,)
    assert policy.calls == 2 * 3  # two env batches (4 + 1 padded to 4) x 24 / 8 chunks
    # the same loop by hand: never terminated (threshold +inf), seeds 0 and 4 per batch
    env, hand = make_env(states), []
    env.success_threshold = float("inf")
    for seed, ids in ((0, [0, 1, 2, 3]), (4, [4, 4, 4, 4])):
        obs, peak = env.reset(seed=seed, state_ids=ids), torch.zeros(4)
        for _ in range(3):
            obs, _, terms, _, info = env.chunk_step(ImageMeanActions().sample(obs, 1.0).actions)
            assert not terms.any()
            peak = torch.maximum(peak, info["scores"].amax(1))
        hand.append(peak)
    assert np.array_equal(peaks, torch.cat(hand)[:5].numpy())
    with pytest.raises(ValueError, match="group_size 1"):
        imagined_peaks(WanWorldModelEnv(world_model=WORLD_MODEL, reward=Brightness(),
                                        initial_states=states, num_envs=4, group_size=2),
                       policy, [0])


def test_threshold_sweep_by_hand():
    peaks = np.array([0.5, 0.9, 0.99, 0.995])
    rates = success_by_threshold(peaks, (0.5, 0.9, 0.99, 0.995, 0.999))
    assert rates == {"0.5": 1.0, "0.9": 0.75, "0.99": 0.5, "0.995": 0.25, "0.999": 0.0}
    assert rate_matching_threshold(peaks, 0.5) == 0.99      # exact
    assert rate_matching_threshold(peaks, 0.8) == 0.9       # 0.75 at 0.7 .. 0.9: the highest
    assert rate_matching_threshold(peaks, 0.9) == 0.5       # 1.0 (off 0.1) beats 0.75 (0.15)
    assert rate_matching_threshold(peaks, 0.375) == 0.995   # a tie 0.5 / 0.25: the higher h


def test_calibrate_on_the_shipped_assets():
    res = calibrate([], states=4, num_envs=4)
    assert res["eval_seed"] == 2 and res["states"] == 4 and res["env_success_threshold"] == 0.99
    assert res["sim_success"] in (0.0, 0.25, 0.5, 0.75, 1.0)  # 4 simulator episodes
    rates = res["wm_success_by_threshold"]
    assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in rates.values())
    assert list(rates.values()) == sorted(rates.values(), reverse=True)  # falls with h
    assert res["wm_success_at_env_threshold"] == rates["0.99"]
    assert len(res["peaks"]) == len(res["sim_outcomes"]) == 4
    assert rates["0.4"] == sum(p >= 0.4 for p in res["peaks"]) / 4
    assert res["sim_success"] == sum(res["sim_outcomes"]) / 4
    # scene-level AUROC of the imagined peak against the simulator's outcome: NaN when the 4
    # scenes all fail or all succeed
    auroc = res["scene_auroc"]
    assert (auroc != auroc) == (res["sim_success"] in (0.0, 1.0))
    assert auroc != auroc or 0.0 <= auroc <= 1.0
    with pytest.raises(ConfigError, match="--eval-seed 1 is the unseen"):
        calibrate([], eval_seed=1, states=4)  # the unseen scenes: refused
