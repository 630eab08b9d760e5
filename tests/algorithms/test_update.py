"""The update's stages (wmrl/algorithms/update.py) on a batch small enough to check by hand.

4 episodes in 2 groups, 2 chunks of 2 steps, 3 tokens per chunk:
  ep0 succeeds at step 2 (reward 1, done)   -> return 1, steps 0-2 valid, chunks 0 and 1
  ep1 stops at step 1 with nothing           -> return 0, steps 0-1 valid, chunk 0 only
  ep2, ep3 fail at step 3                    -> return 0, every step valid (group 1 is flat)
"""

import math

import pytest
import torch

from wmrl.algorithms import grpo
from wmrl.algorithms.update import (
    Samples,
    flatten_samples,
    kept_tokens,
    pad_samples,
    ratios,
    resample_counts,
    rollout_counts,
    score_episodes,
)

REWARDS = torch.tensor([[0.0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
DONES = torch.tensor([[0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1]], dtype=torch.bool)
SUCCESS = torch.tensor([True, False, False, False])
A = 0.5 / math.sqrt(0.5)  # group 0: returns [1, 0], mean 1/2, unbiased std sqrt(1/2)


def scored(**kw):
    return score_episodes(REWARDS, DONES, SUCCESS, chunks=2, group_size=2, **kw)


def test_score_episodes_keeps_the_informative_group():
    s = scored()
    assert s.returns.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert s.chunk_mask.tolist() == [[True, True], [True, False], [True, True], [True, True]]
    torch.testing.assert_close(s.advantages, torch.tensor([A, -A, 0.0, 0.0]))
    assert s.keep.tolist() == [True, True, False, False] and s.valid is None


def test_score_episodes_filters_and_drops():
    # RLinf's return filter alone: group means 1/2 (kept) and 0 (outside [1/4, 1])
    s = scored(filter_groups=False, return_filter=(0.25, 1.0))
    assert s.keep.tolist() == [True, True, False, False]
    # ep0's second verdict disagrees: it is left out, its group has one valid episode left
    s = scored(drop_unrepeatable=True, resample_success=torch.zeros(4, dtype=torch.bool))
    assert s.valid.tolist() == [False, True, True, True]
    assert s.keep.tolist() == [False] * 4 and s.advantages.tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="env.resample_check=true"):
        scored(drop_unrepeatable=True)


def test_rollout_counts_are_sums_over_episodes():
    s = scored(drop_unrepeatable=True, resample_success=torch.tensor([False, False, True, False]))
    counts = rollout_counts(s, SUCCESS, torch.tensor([False, False, True, False]))
    assert counts["rollout/return"] == (1.0, 4.0) and counts["rollout/success"] == (1.0, 4.0)
    assert counts["rollout/episode_len"] == (3 + 2 + 4 + 4, 4.0)
    assert counts["rollout/dropped_unrepeatable"] == (2.0, 4.0)  # ep0 and ep2 disagree
    assert counts["rollout/kept_groups"][0] + counts["rollout/zero_var_groups"][0] == 4.0
    assert ratios({"a": (1.0, 4.0), "b": (3.0, 0.0)}) == {"a": 0.25, "b": 0.0}


def test_resample_counts_hand_checked():
    m = ratios(resample_counts(torch.tensor([1, 1, 0, 0, 1]), torch.tensor([1, 0, 0, 1, 1])))
    # agree on 3 of 5; 1 of the 3 imagined successes is not repeated; 3 of 5 resampled wins
    assert m == pytest.approx({"wm/resample_agreement": 0.6, "wm/fragile_success": 1 / 3,
                               "wm/resample_success": 0.6})
    assert ratios(resample_counts(torch.zeros(3), torch.ones(3)))["wm/fragile_success"] == 0.0


def test_samples_are_the_kept_episodes_valid_chunks_then_padded():
    s = scored()
    rows, token_mask = kept_tokens(s, tokens_per_chunk=3)
    assert rows.tolist() == [0, 1] and token_mask.sum(1).tolist() == [6, 3]
    weights = grpo.aggregation_weights(token_mask, "traj-mean")  # 1/L_i/N: 1/12 and 1/6
    samples = flatten_samples(s, rows, weights.view(-1, 2, 3))
    assert (samples.episode.tolist(), samples.chunk.tolist()) == ([0, 0, 1], [0, 1, 0])
    torch.testing.assert_close(samples.advantages, torch.tensor([A, A, -A]))
    torch.testing.assert_close(samples.weights, torch.tensor([[1 / 12] * 3, [1 / 12] * 3,
                                                              [1 / 6] * 3]))
    assert samples.weights.sum().item() == pytest.approx(1.0)  # the loss is a weighted mean
    padded = pad_samples(samples, 5)
    assert len(padded) == 5 and padded.episode.tolist() == [0, 0, 1, 0, 0]
    assert padded.chunk.tolist()[3:] == [0, 0] and padded.advantages.tolist()[3:] == [0.0, 0.0]
    assert padded.weights[3:].abs().sum() == 0  # padding counts in neither loss nor metrics
    assert pad_samples(samples, 3) is samples
    empty = Samples(*(torch.zeros(0, dtype=torch.long) for _ in range(3)), torch.zeros(0, 3))
    assert len(pad_samples(empty, 2)) == 2
