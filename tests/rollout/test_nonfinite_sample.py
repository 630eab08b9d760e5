"""``RolloutActor.sample`` re-draws a sample whose log-probs are NaN/Inf (in-process, no Ray)."""

import numpy as np
import pytest
import torch
from toys import LinearBinPolicy

from wmrl.rollout.workers import MAX_REDRAWS, RolloutActor


class NaNSamplePolicy(LinearBinPolicy):
    """Sampled log-probs are NaN on the first ``nan_draws`` calls."""

    def __init__(self, nan_draws: int):
        super().__init__()
        self.nan_draws, self.draws = nan_draws, 0

    def sample(self, obs, temperature, generator=None):
        out = super().sample(obs, temperature, generator)
        self.draws += 1
        if self.draws <= self.nan_draws:
            out.logprobs[0, 0] = float("nan")
        return out


OBS = {"image": np.zeros((2, 8, 8, 3), dtype=np.uint8), "task": ["reach"] * 2}


def test_a_nan_draw_is_redrawn_with_the_advanced_generator():
    policy = NaNSamplePolicy(nan_draws=1)
    actor = RolloutActor(policy=policy, device="cpu", name="policy-0")
    _, record = actor.sample(0, OBS, temperature=1.0, seed=7)
    assert policy.draws == 2 and np.isfinite(record["logprobs"]).all()
    g = torch.Generator().manual_seed(7)  # the same seed's second draw
    obs = {"image": torch.from_numpy(OBS["image"]), "task": OBS["task"]}
    LinearBinPolicy().sample(obs, 1.0, g)
    second = LinearBinPolicy().sample(obs, 1.0, g)
    assert np.array_equal(record["tokens"], second.tokens.numpy())
    # the zero-init policy is uniform: every log-prob is -log(256)
    assert np.allclose(record["logprobs"], -np.log(256))


def test_always_nan_raises_after_the_redraws():
    policy = NaNSamplePolicy(nan_draws=10**6)
    actor = RolloutActor(policy=policy, device="cpu", name="policy-0")
    with pytest.raises(RuntimeError, match="policy-0: policy version -1 .*logits are NaN/Inf"):
        actor.sample(0, OBS, temperature=1.0, seed=7)
    assert policy.draws == 1 + MAX_REDRAWS == 4
