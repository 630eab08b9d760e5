"""``lr_multiplier``: hand-checked factors, and the pipeline's warm-up + cosine to 10%."""

import math

import pytest

from wmrl.algorithms.lr_schedule import lr_multiplier


def test_lr_multiplier_hand_checked():
    assert [lr_multiplier(s, 4) for s in range(4)] == [1.0, 1.0, 1.0, 1.0]
    # cosine over 4 steps: (1 + cos(pi s / 4)) / 2 = 1, 0.8536, 0.5, 0.1464
    got = [lr_multiplier(s, 4, "cosine") for s in range(5)]
    assert got == pytest.approx([1.0, 0.853553, 0.5, 0.146447, 0.0], abs=1e-6)
    # floor 0.2: 0.2 + 0.8 x the above
    assert lr_multiplier(2, 4, "cosine", min_ratio=0.2) == pytest.approx(0.6)
    # 2 warm-up steps (1/2, 1), then cosine over the remaining 2 (1, 0.5)
    got = [lr_multiplier(s, 4, "cosine", warmup_steps=2) for s in range(4)]
    assert got == pytest.approx([0.5, 1.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_multiplier(0, 4, "linear")


def test_pipeline_schedule_is_warmup_then_cosine_to_a_tenth():
    # the SFT and world-model trainings' schedule (min_ratio 0.1), as they computed it inline
    for step in range(12):
        p = (step - 2) / 8
        want = (step + 1) / 2 if step < 2 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
        assert lr_multiplier(step, 10, "cosine", 2, min_ratio=0.1) == (
            want if step <= 10 else 0.1)
