"""``wmrl/plan/meta.py``: the models built on the meta device, from the real configs or from
present checkpoints' own configs."""

import torch
from real_size_plans import default_plan, plan_for

from wmrl.build import to_container
from wmrl.plan.compose import compose
from wmrl.plan.meta import build_policy, build_world_model
from wmrl.policies.checkpoint import is_policy_dir
from wmrl.world_model.files import CONFIG_FILES, is_world_model_dir


def test_param_counts_come_from_the_meta_modules():
    cfg = compose([])
    policy, src = build_policy(to_container(cfg.policy))
    wm, wm_src = build_world_model(to_container(cfg.env)["world_model"])
    assert "published 7B" in src and "architecture in env.world_model" in wm_src
    for m in (policy, wm):  # nothing allocated: every parameter and buffer is on meta
        assert {t.device.type for t in [*m.parameters(), *m.buffers()]} == {"meta"}
    p = default_plan().params
    assert p["policy"]["params"] == sum(t.numel() for t in policy.parameters())
    assert 7.4e9 < p["policy"]["params"] < 7.6e9  # OpenVLA-OFT 7.5B
    assert p["policy"]["params"] == 7_541_237_184
    assert 4.9e9 < p["dit"]["params"] < 5.1e9  # Wan2.2-TI2V-5B DiT
    assert p["dit"]["params"] == sum(t.numel() for t in wm.transformer.parameters())
    assert 0.6e9 < p["vae"]["params"] < 0.8e9 and 10e6 < p["reward"]["params"] < 12e6
    assert p["dit"]["dtype"] == "bfloat16"
    assert p["policy"]["dtype"] == "float32"  # master weights (conf/experiment/real_size.yaml)
    # diffusers' float32-kept DiT modules stay float32, as from_pretrained keeps them
    assert wm.transformer.condition_embedder.time_embedder.linear_1.weight.dtype == torch.float32


def test_present_checkpoints_are_planned_from_their_own_configs():
    """The shipped tabletop checkpoints: configs read from their directories, still on meta."""
    plan = plan_for("policy=openvla_oft_tabletop", "env=wan_tabletop",
                    "reward=resnet_tabletop", "trainer.devices=1")
    h = plan.header
    assert h["policy_source"].startswith("config.json of")
    assert h["world_model_source"].startswith("config.json files of")
    assert h["reward_source"].startswith("config.json of")
    assert h["shard_group"] == 1 and plan.roles["trainer"].working["fsdp_gather_reduce"] == 0
    assert plan.params["policy"]["params"] < 5e6 and plan.params["policy"]["dtype"] == "float32"


def test_a_checkpoint_directory_is_known_by_its_config_files(tmp_path):
    """The one test each (``is_policy_dir``, ``is_world_model_dir``) the plan, the meta build,
    the asset checks and the full-size check share: the architecture's files, all the plan
    reads."""
    assert not is_policy_dir(None) and not is_policy_dir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert is_policy_dir(tmp_path) and is_policy_dir(str(tmp_path))
    wm = tmp_path / "wm"
    for name in CONFIG_FILES:
        assert not is_world_model_dir(wm)  # transformer/, vae/, action/: all three or none
        (wm / name).parent.mkdir(parents=True)
        (wm / name).write_text("{}")
    assert is_world_model_dir(wm) and not is_world_model_dir("")
