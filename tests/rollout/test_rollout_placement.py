"""The engine's pieces by hand: busy-time breakdown, batch assembly. That the placements give
identical trajectories on real Ray actors is tested with the bootstrap overlap, on the same
actors (tests/rollout/test_bootstrap_overlap.py::test_placements_give_identical_trajectories)."""

import numpy as np
import pytest

from wmrl.rollout.engine import busy_breakdown


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
