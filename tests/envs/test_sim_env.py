"""TabletopSimEnv: the simulator behind the world-model env's rollout contract (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl.envs.sim_env import TabletopSimEnv
from wmrl.sim.expert import ScriptedExpert
from wmrl.sim.tabletop import initial_frames


def test_groups_share_the_world_model_envs_scenes_and_expert_scores_one_each():
    env = TabletopSimEnv(num_envs=4, group_size=2, chunk=1, max_episode_steps=64, num_states=8,
                         image_size=16, seed=3)
    obs = env.reset()
    # the draw WanWorldModelEnv.reset makes with the same seed
    ids = torch.randint(0, 8, (2,), generator=torch.Generator().manual_seed(3 + 7919))
    first, _ = initial_frames("red_on_plate", 8, image_size=16)
    assert obs["image"].shape == (4, 16, 16, 3) and obs["image"].dtype == torch.uint8
    np.testing.assert_array_equal(obs["image"].numpy(), first[ids.repeat_interleave(2)])
    assert obs["task"] == ["put the red block on the green plate"] * 4

    expert = ScriptedExpert()
    total = torch.zeros(4)
    for _ in range(64):
        states = {"state": np.stack([e._obs()["state"] for e in env.vec.envs]),
                  "task": ["red_on_plate"] * 4}
        obs, rewards, terms, truncs, info = env.chunk_step(torch.from_numpy(expert(states)))
        assert rewards.shape == terms.shape == truncs.shape == (4, 1)
        total += rewards.sum(1)
        if (terms | truncs).all():
            break
    # the clean expert solves every scene; the episode ends on the success frame (reward 1)
    assert info["success"].tolist() == [True] * 4
    assert total.tolist() == [1.0] * 4 and not truncs.any()
    env.close()


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="env.reward=null"):
        TabletopSimEnv(num_envs=2, reward={"_target_": "x"})
    with pytest.raises(ValueError, match="multiple of group_size"):
        TabletopSimEnv(num_envs=3, group_size=2)
    env = TabletopSimEnv(num_envs=2, chunk=8, num_states=4, image_size=16)
    with pytest.raises(RuntimeError, match="reset"):
        env.chunk_step(torch.zeros(2, 8, 7))
    env.reset()
    with pytest.raises(ValueError, match=r"\[num_envs, chunk, 7\]"):
        env.chunk_step(torch.zeros(2, 4, 7))
    env.close()
