"""The three placements run on real Ray actors and give identical trajectories."""

import numpy as np
import pytest
import torch

from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.rollout.engine import busy_breakdown


def make_dm(placement, stages):
    return RolloutDataModule(
        policy={"_target_": "toys.LinearBinPolicy"},
        env={"_target_": "toys.ReachEnv", "tolerance": 0.52},
        num_envs=16, group_size=4, rollout_epochs=2, max_episode_steps=24, chunk=8,
        temperature=1.0, placement=placement, pipeline_stages=stages, num_env_workers=2,
        num_rollout_workers=1, worker_cpus=0.25, seed=3,
    )


@pytest.mark.slow
def test_placements_give_identical_trajectories(ray_local):
    torch.manual_seed(0)
    from toys import LinearBinPolicy

    weights = LinearBinPolicy().state_dict()
    weights["bias"] = torch.randn_like(weights["bias"])  # a non-uniform policy
    batches = {}
    for placement, stages in (("collocated", 2), ("disaggregated", 2), ("hybrid", 2),
                              ("disaggregated", 1)):
        dm = make_dm(placement, stages)
        dm.setup("fit")
        try:
            dm.sync_weights(weights, version=7)
            batches[placement, stages] = dm.rollout()
            timing = dm.step_timing()
        finally:
            dm.teardown()
        assert timing["rollout_s"] > 0 and timing["env_s"] > 0 and timing["policy_s"] > 0
        assert timing["reward_s"] == 0.0  # the toy env has no reward model
    ref = batches["collocated", 2]
    n = 2 * 16
    assert ref.tokens.shape == (n, 3, 56) and ref.image.shape == (n, 3, 8, 8, 3)
    assert ref.rewards.shape == (n, 24) and ref.version == 7
    assert 0 < ref.success.float().mean() < 1
    for key in [("disaggregated", 2), ("hybrid", 2)]:
        for name in ("image", "tokens", "logprobs", "rewards", "dones", "success"):
            assert torch.equal(getattr(batches[key], name), getattr(ref, name)), (key, name)
    # a different stage split is a different sub-batching: same shapes, other samples
    assert batches["disaggregated", 1].tokens.shape == ref.tokens.shape


def test_busy_breakdown_by_hand():
    spans = [("env", 0.0, 2.0), ("policy", 1.0, 3.0), ("env", 5.0, 6.0), ("policy", 9.0, 12.0)]
    out = busy_breakdown(spans, start=0.0, end=10.0)
    assert out["env_s"] == 3.0 and out["policy_s"] == 3.0  # policy clipped at 10
    assert out["idle_s"] == pytest.approx(10 - (3 + 1 + 1))  # covered [0,3],[5,6],[9,10]
    assert np.isclose(busy_breakdown([], 0.0, 4.0)["idle_s"], 4.0)


def test_resample_verdicts_reach_the_batch_only_when_every_record_has_them():
    from wmrl.rollout.engine import assemble, concat

    def sample(b):
        return {"image": np.zeros((b, 2, 2, 3), np.uint8), "tokens": np.zeros((b, 4)),
                "logprobs": np.zeros((b, 4), np.float32), "task": ["t"] * b, "version": 1}

    def step(b, verdict=None):
        rec = {"rewards": np.zeros((b, 2), np.float32), "terminations": np.zeros((b, 2), bool),
               "truncations": np.zeros((b, 2), bool), "success": np.zeros(b, bool)}
        if verdict is not None:
            rec["resample_success"] = np.array(verdict)
        return rec

    # the env's verdicts are cumulative: the last chunk's record holds every episode's
    part_a = assemble([sample(2)] * 2, [step(2, [False, False]), step(2, [True, False])])
    part_b = assemble([sample(2)] * 2, [step(2, [False, False]), step(2, [False, True])])
    assert concat([part_a, part_b]).resample_success.tolist() == [True, False, False, True]
    plain = assemble([sample(2)] * 2, [step(2), step(2)])
    assert concat([part_a, plain]).resample_success is None
