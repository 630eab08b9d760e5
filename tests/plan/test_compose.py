"""``wmrl/plan/compose.py``: the real-size defaults under the user's overrides."""

from wmrl.plan.compose import REAL_SIZE_DEFAULTS, with_real_size_defaults


def test_real_size_defaults_yield_to_user_overrides():
    assert with_real_size_defaults([]) == list(REAL_SIZE_DEFAULTS)
    args = with_real_size_defaults(["reward=topreward", "trainer.devices=4", "+plan.x=1"])
    assert "trainer.devices=8" not in args and "trainer.devices=4" in args
    assert not [a for a in args if a.startswith("reward=resnet") or a.startswith("reward.")]
    assert "policy=openvla_oft_7b" in args and args[-1] == "+plan.x=1"
