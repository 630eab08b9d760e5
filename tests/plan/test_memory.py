"""``wmrl/plan/memory.py``: the figures per role and placement, checked against the reference
facts."""

from real_size_plans import default_plan, plan_for

from wmrl.plan.memory import GB

# Reference facts handed down with issue 17 (not in REFERENCE.md): the WoVR world model's
# resident memory ~24.9 GB; with every role resident (no offload) the real sizes exceed 80 GB.
REF_WORLD_MODEL_GB = 24.9


def test_trainer_state_is_sharded_over_the_devices():
    default = default_plan()
    p = default.params["policy"]["params"]
    t = default.roles["trainer"]
    assert default.header["shard_group"] == 8
    # float32 master weights (the trained parameters themselves), computing in bf16
    assert default.header["optimizer_dtype"] == "float32"
    assert default.header["compute_dtype"] == "bfloat16"
    assert t.resident["weights"] == 4 * p // 8 and t.working["grads"] == 4 * p // 8
    assert t.resident["adamw_m_v_float32"] == 8 * p // 8 and "master" not in str(t.resident)
    # one Llama layer is the largest FSDP unit; the root holds embeddings, lm_head, projector
    assert default.header["fsdp_unit_params"] == 202_383_360
    on, off = default.activations["on"], default.activations["off"]
    assert on["seq"] == 256 + 64 + 56
    assert 4 * GB < on["total"] < 12 * GB < 80 * GB < off["total"]
    one = plan_for("trainer.devices=1")  # replicated: the whole trainer state on one device
    assert one.header["shard_group"] == 1
    assert one.roles["trainer"].resident["adamw_m_v_float32"] == 8 * p
    assert one.roles["trainer"].peak > 120 * GB


def test_each_precision_setting_is_counted_as_it_runs():
    """16 bytes a parameter for float32 master weights (4 weight, 4 gradient, 8 m + v); 8 for
    AdamW on bf16 weights (the knowing choice); LoRA: the bf16 base's 2 bytes a parameter plus
    16 per float32 adapter parameter. A bf16 policy with float32 AdamW is refused, as the fit
    refuses it."""
    import pytest

    from wmrl.errors import ConfigError

    p = default_plan().params["policy"]["params"]
    bf16 = plan_for("policy.dtype=bfloat16", "algorithm.optimizer_dtype=bf16")  # either name
    assert bf16.header["optimizer_dtype"] == "bfloat16"  # labelled by torch's name
    t = bf16.roles["trainer"]
    assert t.resident["weights"] == 2 * p // 8 and t.working["grads"] == 2 * p // 8
    assert t.resident["adamw_m_v_bfloat16"] == 4 * p // 8
    lora = plan_for("policy.dtype=bfloat16", "policy/lora=rlinf")
    a = lora.header["trained_params"]
    assert 50e6 < a < 200e6 and lora.header["lora"]  # rank 32 on RLinf's targets
    t = lora.roles["trainer"]
    assert t.working["grads"] == 4 * a // 8 and t.resident["adamw_m_v_float32"] == 8 * a // 8
    assert t.resident["weights"] == (2 * p + 4 * a) // 8
    assert t.peak < default_plan().roles["trainer"].peak / 2
    with pytest.raises(ConfigError, match="algorithm.optimizer_dtype=float32 but the trained"):
        plan_for("policy.dtype=bfloat16")


def test_reference_world_model_resident():
    """Reference: the world model holds ~24.9 GB resident. The WoVR recipe steps 8 envs per
    device (64 over 8); at that batch the plan gives 25.0 GB when the VAE runs in float32 (its
    weights 2.8 GB and a decode working set of 11.4 GB) and 17.6 GB with the shipped bfloat16
    VAE. Either way the decode, not the DiT, is the working set, and it grows ~0.7 GB (bf16) per
    env: 64 envs on one device need ~60 GB."""
    default = default_plan()
    wm = default.roles["world_model"]
    assert default.header["envs_per_actor"] == 8
    weights = wm.resident["dit"] + wm.resident["vae"] + wm.resident["action_modules"]
    assert 11.3 * GB < weights < 11.7 * GB
    assert weights < wm.peak < REF_WORLD_MODEL_GB * GB
    assert 16.5 * GB < wm.peak < 18.5 * GB
    fp32 = plan_for("env.world_model.vae_dtype=float32").roles["world_model"]
    assert abs(fp32.peak / GB - REF_WORLD_MODEL_GB) < 0.05 * REF_WORLD_MODEL_GB
    assert default.env_sweep[64] > 55 * GB


def test_reference_all_roles_resident_exceed_80gb_without_offload():
    """Reference: all roles resident on one device exceed 80 GB without offload. The plan
    agrees for 64 envs per device (fit.yaml's rollout.num_envs on one env actor) and for
    training without gradient checkpointing (RLinf's model default, 90 GB of activations per
    micro-batch of 32); with checkpointing and the recipe's 8 envs per device it is 52 GB."""
    def peak(plan, name):
        return next(p for p in plan.placements if p.name.startswith(name)).peak

    many_envs = plan_for("rollout.num_envs=64")
    for plan in (many_envs, plan_for("policy.gradient_checkpointing=false")):
        assert peak(plan, "collocated, nothing offloaded") > 80 * GB
    # offloading idle roles brings it under 80 GB
    assert peak(many_envs, "collocated, idle roles offloaded") < 0.9 * 80 * GB
    assert 45 * GB < peak(default_plan(), "collocated, nothing offloaded") < 0.9 * 80 * GB


def test_placements_and_what_fits():
    default = default_plan()
    by_name = {p.name: p for p in default.placements}
    assert list(by_name) == ["collocated, idle roles offloaded", "collocated, nothing offloaded",
                             "disaggregated", "hybrid (2 stages)"]
    off = by_name["collocated, idle roles offloaded"]
    assert off.peak == default.roles["trainer"].peak and off.binding == "trainer"
    assert off.fits == {40: True, 80: True, 141: True}
    assert by_name["collocated, nothing offloaded"].fits == {40: False, 80: True, 141: True}
    assert by_name["disaggregated"].devices == 24
    hybrid = by_name["hybrid (2 stages)"]  # 8 envs in one group of 8 cannot form 2 stages
    assert hybrid.peak is None and "whole groups" in hybrid.binding
    plan16 = plan_for("rollout.num_envs=16")
    h16 = next(p for p in plan16.placements if p.name.startswith("hybrid"))
    assert h16.peak is not None
    assert plan16.roles["env_hybrid"].peak < plan16.roles["env"].peak  # steps 8 of 16 envs
