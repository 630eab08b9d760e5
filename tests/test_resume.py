"""Runs are reproducible: the same config twice gives the same weights, and a run stopped at
step 2 and resumed from its last.ckpt ends where a straight run ends (weights, AdamW state)."""

import pytest
import torch
from test_fit_toy import toy_cfg

from wmrl.fit import fit

pytestmark = pytest.mark.slow


def _state(path):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    opt = ckpt["optimizer_states"][0]["state"]
    return ckpt["global_step"], ckpt["state_dict"], opt


def _assert_same(a, b):
    (step_a, sd_a, opt_a), (step_b, sd_b, opt_b) = a, b
    assert step_a == step_b
    assert sd_a.keys() == sd_b.keys() and opt_a.keys() == opt_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), k
    for p in opt_a:
        for k in opt_a[p]:
            assert torch.equal(torch.as_tensor(opt_a[p][k]), torch.as_tensor(opt_b[p][k])), (p, k)


def test_same_config_same_weights_and_resume_is_bit_exact(tmp_path, ray_local):
    over = {"trainer.max_steps": 4, "logger": None}
    fit(toy_cfg(tmp_path / "a", **over))
    fit(toy_cfg(tmp_path / "b", **over))
    straight = _state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    _assert_same(straight, _state(tmp_path / "b" / "checkpoints" / "last.ckpt"))
    assert straight[0] == 4 and straight[1]["policy.bias"].abs().sum() > 0  # it trained

    fit(toy_cfg(tmp_path / "c", **{**over, "trainer.max_steps": 2}))
    fit(toy_cfg(tmp_path / "c", **over, ckpt_path=str(tmp_path / "c" / "checkpoints" /
                                                      "last.ckpt")))
    _assert_same(straight, _state(tmp_path / "c" / "checkpoints" / "last.ckpt"))
