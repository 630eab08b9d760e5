"""TabletopSimEnv: the simulator behind the world-model env's rollout contract (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from toys import count_renders, expert_actions

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


def test_skip_intermediate_renders_changes_nothing_the_contract_returns(monkeypatch):
    """skip_intermediate_renders (the default) vs rendering every control step: bit-identical
    observations, rewards, done flags and success over whole episodes (success mid-chunk,
    success on a chunk's last step, truncation), for one render per env and chunk."""
    calls = count_renders(monkeypatch)
    rng = np.random.default_rng(0)
    # envs: state 3 (expert: success at step 23), 3 (random), 1 (expert: step 24), 1 (random)
    acts = torch.from_numpy(np.stack([
        expert_actions("red_on_plate", 3, 32), rng.uniform(-1, 1, (32, 7)),
        expert_actions("red_on_plate", 1, 32), rng.uniform(-1, 1, (32, 7))]))
    runs = {}
    for skip in (True, False):
        env = TabletopSimEnv(num_envs=4, group_size=2, chunk=8, max_episode_steps=32,
                             num_states=8, image_size=32, seed=0,
                             skip_intermediate_renders=skip)
        out = [env.reset(state_ids=[3, 1])]
        calls.clear()
        for k in range(4):
            out.append(env.chunk_step(acts[:, 8 * k : 8 * (k + 1)].float()))
        runs[skip] = (out, len(calls))
        env.close()
    (a, n_skip), (b, n_full) = runs[True], runs[False]
    assert torch.equal(a[0]["image"], b[0]["image"]) and a[0]["task"] == b[0]["task"]
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(a[1:], b[1:]):
        assert o1["image"].dtype == torch.uint8 and torch.equal(o1["image"], o2["image"])
        for x, y in [(r1, r2), (te1, te2), (tr1, tr2), (i1["success"], i2["success"])]:
            assert torch.equal(x, y)
    assert b[-1][4]["success"].tolist() == [True, False, True, False]
    assert b[-1][3][:, -1].tolist() == [False, True, False, True]  # the random envs time out
    assert b[3][1].sum(1).tolist() == [1.0, 0.0, 1.0, 0.0]  # success reward in chunk 3
    assert n_full == 23 + 32 + 24 + 32 and n_skip == 3 + 4 + 3 + 4
