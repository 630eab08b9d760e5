"""GRPO math on small hand-computed numbers."""

import math

import pytest
import torch

from wmrl.algorithms.grpo import (
    aggregation_weights,
    group_advantages,
    informative_groups,
    policy_loss,
    return_filtered_groups,
    trajectory_returns,
    unrepeatable_episodes,
)


def test_trajectory_returns_stop_at_first_done():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0], [0.0, 5.0, 7.0, 9.0]])
    dones = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0]])
    returns, mask = trajectory_returns(rewards, dones)
    assert returns.tolist() == [3.0, 4.0, 0.0]  # 1+2 | all four | only step 0
    assert mask.tolist() == [
        [True, True, False, False],
        [True, True, True, True],
        [True, False, False, False],
    ]


def test_trajectory_returns_shape_error():
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        trajectory_returns(torch.zeros(2, 3), torch.zeros(2, 4))


def test_group_advantages_unbiased_std():
    # group 1: [1, 0, 0, 1] mean .5, unbiased std sqrt(1/3); group 2: all equal -> 0
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]), 4, eps=0.0)
    s = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(adv[:4], torch.tensor([s, -s, -s, s]))
    assert torch.all(torch.isnan(adv[4:]))  # eps=0 on a constant group: why eps exists
    adv = group_advantages(torch.tensor([2.0, 2.0, 2.0, 2.0]), 4)
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_group_advantages_dr_grpo_and_errors():
    adv = group_advantages(torch.tensor([3.0, 1.0, 5.0, 5.0]), 2, scale="none")
    assert adv.tolist() == [1.0, -1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="group_size=3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(4), 2, scale="batch")


def test_return_filter_keeps_groups_whose_mean_return_is_in_bounds():
    # RLinf's [0.5, 4.5] on returns 5 * success: group means 1.25, 5.0, 0.0, and 0.5 (the
    # lower bound itself: kept)
    returns = torch.tensor([0.0, 5.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0, 0.0, 0.0, 0.0, 0.0,
                            0.0, 0.0, 0.0, 2.0])
    keep = return_filtered_groups(returns, 4, 0.5, 4.5)
    assert keep.view(4, 4)[:, 0].tolist() == [True, False, False, True]
    assert keep.view(4, 4).all(1).tolist() == keep.view(4, 4).any(1).tolist()  # whole groups


def test_informative_groups_masks_all_fail_and_all_success():
    success = torch.tensor([0, 0, 1, 1, 1, 0])
    assert informative_groups(success, 2).tolist() == [False, False, False, False, True, True]


def test_policy_loss_unclipped_equals_minus_advantage():
    # ratio == 1 everywhere: loss = -(1/N) sum_i A_i
    lp = torch.zeros(2, 3)
    loss, metrics = policy_loss(lp, lp, torch.tensor([1.0, -3.0]), torch.ones(2, 3))
    assert loss.item() == pytest.approx(1.0)  # -(1 - 3)/2
    assert metrics["clip_fraction"].item() == 0.0
    assert metrics["approx_kl"].item() == pytest.approx(0.0)
    assert metrics["ratio_mean"].item() == pytest.approx(1.0)


def test_policy_loss_clipping_by_hand():
    # one token each; ratio 1.5 with A=+1 -> clipped at 1.28: loss -1.28
    #                 ratio 0.5 with A=+1 -> unclipped (pessimistic): loss -0.5
    #                 ratio 0.5 with A=-1 -> clipped at 0.8: loss +0.8
    lp = torch.log(torch.tensor([[1.5], [0.5], [0.5]]))
    old = torch.zeros(3, 1)
    adv = torch.tensor([1.0, 1.0, -1.0])
    loss, metrics = policy_loss(lp, old, adv, torch.ones(3, 1))
    assert loss.item() == pytest.approx((-1.28 - 0.5 + 0.8) / 3, abs=1e-6)
    assert metrics["clip_fraction"].item() == pytest.approx(2 / 3)
    assert metrics["ratio_max"].item() == pytest.approx(1.5)
    # k3 KL of ratio r: r - 1 - log r
    kl = [r - 1 - math.log(r) for r in (1.5, 0.5, 0.5)]
    assert metrics["approx_kl"].item() == pytest.approx(sum(kl) / 3, abs=1e-6)


def test_policy_loss_dual_clip_bounds_negative_advantage():
    # ratio 10, A=-1: plain loss = max(10, 1.28) = 10; dual clip 3 bounds it at 3
    lp = torch.log(torch.tensor([[10.0]]))
    adv = torch.tensor([-1.0])
    plain, _ = policy_loss(lp, torch.zeros(1, 1), adv, torch.ones(1, 1))
    dual, _ = policy_loss(lp, torch.zeros(1, 1), adv, torch.ones(1, 1), dual_clip=3.0)
    assert plain.item() == pytest.approx(10.0, rel=1e-5)
    assert dual.item() == pytest.approx(3.0)
    # positive advantages are untouched by dual clip
    pos, _ = policy_loss(lp, torch.zeros(1, 1), -adv, torch.ones(1, 1), dual_clip=3.0)
    assert pos.item() == pytest.approx(-1.28)


def test_aggregations_by_hand():
    # row 0 has 1 valid token with loss -A*1 = -2; row 1 has 3 valid tokens with loss -1 each
    lp = torch.zeros(2, 4)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    adv = torch.tensor([2.0, 1.0])
    traj, _ = policy_loss(lp, lp, adv, mask, aggregation="traj-mean")
    tok, _ = policy_loss(lp, lp, adv, mask, aggregation="token-mean")
    seq, _ = policy_loss(lp, lp, adv, mask, aggregation="seq-mean-token-sum")
    assert traj.item() == pytest.approx((-2 / 1 + -3 / 3) / 2)  # -1.5
    assert tok.item() == pytest.approx((-2 - 3) / 4)  # -1.25
    assert seq.item() == pytest.approx((-2 - 3) / 2)  # -2.5
    with pytest.raises(ValueError, match="aggregation"):
        policy_loss(lp, lp, adv, mask, aggregation="mean")


def test_rows_without_valid_tokens_give_zero_not_nan():
    lp = torch.randn(3, 4, requires_grad=True)
    mask = torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    for agg in ("traj-mean", "token-mean", "seq-mean-token-sum"):
        loss, metrics = policy_loss(lp, lp.detach(), torch.tensor([5.0, 1.0, -2.0]), mask,
                                    aggregation=agg)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
        assert lp.grad[0].abs().sum() == 0 and lp.grad[2].abs().sum() == 0
        lp.grad = None
    empty, metrics = policy_loss(lp, lp.detach(), torch.ones(3), torch.zeros(3, 4))
    assert empty.item() == 0.0 and all(torch.isfinite(v) for v in metrics.values())


def test_micro_batch_weights_sum_to_full_batch_loss():
    torch.manual_seed(0)
    lp, old = torch.randn(6, 5), torch.randn(6, 5)
    adv = torch.randn(6)
    mask = torch.rand(6, 5) > 0.3
    full, _ = policy_loss(lp, old, adv, mask)
    w = aggregation_weights(mask, "traj-mean")
    parts = [policy_loss(lp[s], old[s], adv[s], mask[s], weights=w[s])[0]
             for s in (slice(0, 2), slice(2, 5), slice(5, 6))]
    assert sum(parts).item() == pytest.approx(full.item(), abs=1e-6)


def test_gradient_sign_raises_logprob_of_positive_advantage():
    lp = torch.zeros(2, 1, requires_grad=True)
    loss, _ = policy_loss(lp, lp.detach(), torch.tensor([1.0, -1.0]), torch.ones(2, 1))
    loss.backward()
    assert lp.grad[0, 0] < 0 < lp.grad[1, 0]  # descent raises row 0, lowers row 1


def test_global_normalisers_make_rank_weights_slices_of_the_union():
    """Ranks holding row blocks of a batch, with the normalisers summed over ranks, get
    exactly the union's weights (the module then multiplies by R against gradient averaging);
    without them a rank normalises by its own counts."""
    torch.manual_seed(0)
    mask = torch.rand(7, 5) > 0.4
    mask[:, 0] = True
    blocks = (slice(0, 1), slice(1, 1), slice(1, 7))  # 1 row, no row (all filtered), 6 rows
    for agg in ("traj-mean", "token-mean", "seq-mean-token-sum"):
        whole = aggregation_weights(mask, agg)
        assert torch.equal(aggregation_weights(mask, agg, rows=None, tokens=None), whole)
        parts = [aggregation_weights(mask[b], agg, rows=7, tokens=int(mask.sum()))
                 for b in blocks]
        torch.testing.assert_close(torch.cat(parts), whole, rtol=1e-6, atol=0)
        assert parts[1].shape == (0, 5)
        local = aggregation_weights(mask[blocks[0]], agg)  # its own normaliser: far too big
        assert local.sum() > 1.5 * whole[blocks[0]].sum()


def test_kl_penalty_to_the_reference_by_hand():
    # one token, A = 0: the loss is beta * k3 with logp = log 0.5, logp_ref = log 0.25:
    # k3 = exp(-log 2) + log 2 - 1 = 0.5 + 0.6931 - 1 = 0.1931; d loss / d logp = beta (1 - 0.5)
    lp = torch.full((1, 1), math.log(0.5), requires_grad=True)
    ref = torch.full((1, 1), math.log(0.25))
    loss, metrics = policy_loss(lp, lp.detach(), torch.zeros(1), torch.ones(1, 1),
                                ref_logprobs=ref, kl_coef=0.1)
    assert loss.item() == pytest.approx(0.1 * (0.5 + math.log(2) - 1))
    assert metrics["ref_kl"].item() == pytest.approx(0.5 + math.log(2) - 1)
    loss.backward()
    assert lp.grad.item() == pytest.approx(0.05)
    # the same policy as the reference costs nothing; a masked token never counts
    same, m = policy_loss(ref, ref, torch.zeros(1), torch.ones(1, 1), ref_logprobs=ref,
                          kl_coef=0.1)
    assert same.item() == 0.0 and m["ref_kl"].item() == 0.0
    masked, m = policy_loss(lp.detach().expand(1, 2), lp.detach().expand(1, 2), torch.zeros(1),
                            torch.tensor([[1.0, 0.0]]), ref_logprobs=ref.expand(1, 2),
                            kl_coef=0.1)
    assert m["ref_kl"].item() == pytest.approx(0.5 + math.log(2) - 1)
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, lp, torch.zeros(1), torch.ones(1, 1), kl_coef=0.1)


def test_unrepeatable_episodes_leave_their_group_statistics():
    """A group of 4 with successes [1, 1, 0, 0] whose second draws say [1, 0, 0, 0]: episode 1
    is left out; the others' returns [1, 0, 0] have mean 1/3 and unbiased std sqrt(1/3)."""
    success = torch.tensor([1, 1, 0, 0, 1, 0, 0, 0])
    again = torch.tensor([1, 0, 0, 0, 1, 0, 1, 0])
    valid = ~unrepeatable_episodes(success, again)
    assert valid.tolist() == [True, False, True, True, True, True, False, True]
    adv = group_advantages(success.float(), 4, eps=0.0, valid=valid)
    s = math.sqrt(1 / 3)
    assert torch.allclose(adv[:4], torch.tensor([(2 / 3) / s, 0.0, -(1 / 3) / s, -(1 / 3) / s]))
    # group 2 keeps [1, 0, 0]: the same figures at rows 4, 5, 7
    assert torch.allclose(adv[4:], torch.tensor([(2 / 3) / s, -(1 / 3) / s, 0.0, -(1 / 3) / s]))
    dr = group_advantages(success.float(), 4, scale="none", valid=valid)
    assert torch.allclose(dr[:4], torch.tensor([2 / 3, 0.0, -1 / 3, -1 / 3]))
    # all valid: the plain advantages, exactly
    ones = torch.ones(8, dtype=torch.bool)
    assert torch.equal(group_advantages(success.float(), 4, valid=ones),
                       group_advantages(success.float(), 4))


def test_informative_groups_judge_the_valid_episodes():
    """[1, 0] with the success left out is a flat group of one failure; a group with one valid
    episode has no variance either."""
    success = torch.tensor([1, 0, 1, 0, 1, 1])
    valid = torch.tensor([False, True, True, True, True, False])
    assert informative_groups(success, 2, valid).tolist() == \
        [False, False, True, True, False, False]
    assert informative_groups(success, 2).tolist() == [True, True, True, True, False, False]
