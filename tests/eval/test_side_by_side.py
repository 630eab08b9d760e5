"""The policy in the world model beside the policy in the simulator
(wmrl/eval/side_by_side.py), with the shipped policy, world model and reward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_config import fit_cfg

from wmrl.build import build, to_container
from wmrl.eval.side_by_side import imagined_vs_real
from wmrl.io.videos import side_by_side_video
from wmrl.sim.tabletop import initial_frames


def test_side_by_side_video_holds_the_shorter():
    a = np.arange(3, dtype=np.uint8)[:, None, None, None] * np.ones((3, 4, 5, 3), np.uint8)
    b = 10 + np.arange(5, dtype=np.uint8)[:, None, None, None] * np.ones((5, 4, 5, 3), np.uint8)
    v = side_by_side_video(a, b)
    assert v.shape == (5, 4, 12, 3)  # 5 frames, 5 + 2 + 5 wide
    assert (v[3:, :, :5] == 2).all() and (v[:, :, 5:7] == 255).all()  # a holds its last frame
    assert (v[4, :, 7:] == 14).all()


@pytest.fixture(scope="module")
def rollouts():
    cfg = fit_cfg()
    torch.manual_seed(0)
    policy = build(cfg.policy)
    sim = to_container(cfg.callbacks.sim_eval.env)
    kw = dict(task="red_of_two", scenes=2, chunk=8, max_episode_steps=16, sim_env=sim, seed=0)
    env = to_container(cfg.env)
    return imagined_vs_real(policy, env, **kw), imagined_vs_real(policy, env, **kw), cfg


def test_the_same_scenes_in_the_world_model_and_the_simulator(rollouts):
    first, again, cfg = rollouts
    start, _ = initial_frames("red_of_two", 2, seed=0, image_size=64, camera="front_close")
    for i, r in enumerate(first):
        # both start from the simulator's own first frame of scene i
        assert np.array_equal(r.real[0], start[i]) and np.array_equal(r.imagined[0], start[i])
        assert r.imagined.shape[1:] == r.real.shape[1:] == (64, 64, 3)
        assert 1 < len(r.imagined) <= 17 and 1 < len(r.real) <= 17
        # the verdict is the env's: the peak reward score against the threshold
        assert r.imagined_success == (r.peak_score >= cfg.env.success_threshold)
        assert 0.0 <= r.imagined_return <= cfg.env.reward_coef
    # seeded: the same videos again
    assert all(np.array_equal(a.imagined, b.imagined) and np.array_equal(a.real, b.real)
               for a, b in zip(first, again))


def test_pace_weights_are_the_ones_imagined(rollouts):
    """With PACE's refined weights (here: the shipped ones shifted) the imagined video
    changes and the real one does not."""
    from wmrl.pace.round import trained_state
    from wmrl.world_model.action_wan import ActionWanModel

    first, _, cfg = rollouts
    model = ActionWanModel.from_pretrained(cfg.env.world_model.path)
    with torch.no_grad():
        for p in model.transformer.parameters():
            p.add_(0.05)
    torch.manual_seed(0)
    policy = build(cfg.policy)
    refined = imagined_vs_real(policy, to_container(cfg.env), "red_of_two", 2, 8, 16,
                               to_container(cfg.callbacks.sim_eval.env), seed=0,
                               weights=(trained_state(model), None))
    assert all(np.array_equal(a.real, b.real) for a, b in zip(first, refined))
    assert not all(np.array_equal(a.imagined, b.imagined) for a, b in zip(first, refined))
