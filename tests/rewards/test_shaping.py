"""wmrl.rewards.shaping by hand: scores that are exact in float32, so every check is equality."""

import torch

from wmrl.rewards.shaping import chunk_success, resample_shift, shape_rewards

# two envs, a 3-frame chunk; k = 2, tau = 0.75; the previous chunks ended at s = 0.25 and
# 0.5, so k s_{-1} = [0.5, 1.0]
SCORES = torch.tensor([[0.25, 0.75, 0.5], [0.5, 0.25, 0.5]])
PREV = torch.tensor([0.5, 1.0])


def test_relative_reward_by_hand():
    out = shape_rewards(SCORES, PREV, 0.75, use_rel_reward=True, reward_coef=2.0)
    # env 0: k s = [0.5, 1.5, 1.0], shifted by one [0.5, 0.5, 1.5] -> r = [0, 1, -0.5]
    # env 1: k s = [1.0, 0.5, 1.0], shifted by one [1.0, 1.0, 0.5] -> r = [0, -0.5, 0.5]
    assert torch.equal(out.rewards, torch.tensor([[0.0, 1.0, -0.5], [0.0, -0.5, 0.5]]))
    # max_t s_t = 0.75 >= 0.75 (the threshold counts), 0.5 < 0.75
    assert torch.equal(out.success, torch.tensor([True, False]))
    # the next chunk's k s_{-1}: k times each env's last score
    assert torch.equal(out.last_scaled, torch.tensor([1.0, 1.0]))


def test_relative_return_telescopes_from_reset():
    # one env, k = 4: chunk 1 s = [0.25, 0.5] -> k s = [1, 2], r = [1 - 0, 2 - 1] = [1, 1];
    # chunk 2 s = [0.75, 0.5] -> k s = [3, 2], r = [3 - 2, 2 - 3] = [1, -1];
    # return 2 = k * 0.5, the last score
    first = shape_rewards(torch.tensor([[0.25, 0.5]]), torch.zeros(1), 0.9, True, 4.0)
    second = shape_rewards(torch.tensor([[0.75, 0.5]]), first.last_scaled, 0.9, True, 4.0)
    assert torch.equal(first.rewards, torch.tensor([[1.0, 1.0]]))
    assert torch.equal(second.rewards, torch.tensor([[1.0, -1.0]]))
    assert float(first.rewards.sum() + second.rewards.sum()) == 2.0


def test_binary_reward_by_hand():
    out = shape_rewards(SCORES, PREV, 0.75, use_rel_reward=False, reward_coef=2.0)
    # r_t = 1[s_t >= 0.75]: only env 0's second frame; k plays no part
    assert torch.equal(out.rewards, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(out.success, torch.tensor([True, False]))
    assert torch.equal(out.last_scaled, PREV)  # nothing carried: k s_{-1} stays as it was
    assert torch.equal(chunk_success(SCORES, 0.5), torch.tensor([True, True]))


def test_resample_shift_by_hand():
    first, second = torch.tensor([0.5, 0.75]), torch.tensor([0.25, 1.0])
    # min: read = [0.25, 0.75] -> 2 * (read - first) = [-0.5, 0]
    assert torch.equal(resample_shift(first, second, "min", 2.0), torch.tensor([-0.5, 0.0]))
    # mean: read = [0.375, 0.875] -> 2 * [-0.125, 0.125] = [-0.25, 0.25]
    assert torch.equal(resample_shift(first, second, "mean", 2.0), torch.tensor([-0.25, 0.25]))
