"""Placement by resources: devices derived from what Ray assigned, collocated actors on their
trainer rank's node and card, a missing resource refused up front, weights over a gloo group."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from strategies import devices
from wmrl.config import ConfigError
from wmrl.rollout import placement as place
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.rollout.workers import RolloutActor


def test_visible_lists_map_cards_to_local_indices():
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert devices.local_index("cuda", "5", env) == 1
    assert devices.physical_id("cuda", 1, env) == "5"
    assert devices.local_index("cuda", "3", {}) == 3  # no list: the card is the index
    assert devices.local_index("npu", "2", {"ASCEND_RT_VISIBLE_DEVICES": "2"}) == 0
    assert devices.local_index("xpu", "7", {"ONEAPI_DEVICE_SELECTOR": "level_zero:6,7"}) == 1
    with pytest.raises(RuntimeError, match="card 3 is not visible.*CUDA_VISIBLE_DEVICES=4,5"):
        devices.local_index("cuda", "3", env)


def test_resolve_device_from_assigned_ids(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6")  # Ray narrowed the list to the card it gave
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("MUSA_VISIBLE_DEVICES", raising=False)
    assert place.resolve_device("cuda", {"GPU": ["6"]}) == "cuda:0"
    assert place.resolve_device("auto", {"GPU": ["6"]}) == "cuda:0"
    assert place.resolve_device("auto", {"NPU": ["1"]}) == "npu:0"
    assert place.resolve_device("musa", {"GPU": ["3"]}) == "musa:3"  # Ray ids index MUSA cards
    assert place.resolve_device("auto", {}) == "cpu"
    assert place.resolve_device("cpu", {"GPU": ["6"]}) == "cpu"
    with pytest.raises(ConfigError, match="assigned the policy actor no NPU.*policy_resources"):
        place.resolve_device("npu", {"GPU": ["6"]}, role="policy")
    with pytest.raises(ConfigError, match="rollout.device='tpu'"):
        place.resolve_device("tpu", {})
    # collocated: the trainer's card, mapped through this process's own list
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert place.shared_card("cuda:1") == "cuda:3"
    assert place.resolve_device("auto", {}, shared="cuda:3") == "cuda:1"
    assert place.resolve_device("auto", {}, shared="cpu") == "cpu"


def test_config_checks_name_the_key():
    with pytest.raises(ConfigError, match="rollout.policy_resources requests \\['GPU'\\].*collocated"):
        place.check_roles("auto", "collocated", {"env": {}, "policy": {"GPU": 1}})
    with pytest.raises(ConfigError, match="rollout.device=cuda but rollout.env_resources"):
        place.check_roles("cuda", "disaggregated", {"env": {"render": 1}, "policy": {"GPU": 1}})
    place.check_roles("cuda", "hybrid", {"env": {"GPU": 0.5}, "policy": {"GPU": 0.5}})
    needs = {"rollout.env_resources": {"CPU": 0.5, "render": 1.0},
             "rollout.policy_resources": {"CPU": 1.0, "GPU": 2.0}}
    place.check_cluster(needs, {"CPU": 3, "GPU": 4, "render": 2}, ranks=2)
    with pytest.raises(ConfigError, match="rollout.policy_resources \\(2 for this rank\\).*2 "
                                          "trainer rank.*GPU: 4 but the Ray cluster has GPU: 3"):
        place.check_cluster(needs, {"CPU": 3, "GPU": 3, "render": 2}, ranks=2)
    with pytest.raises(ConfigError, match="render: 2 but the Ray cluster has render: 0"):
        place.check_cluster(needs, {"CPU": 3, "GPU": 4}, ranks=2)


def test_collocated_policy_gets_the_envs_tensor_object():
    """One actor with env and policy: the observation tensor the env returned is the very
    object the policy samples from (no numpy, no copy), and the actions stay tensors."""
    from toys import LinearBinPolicy, ReachEnv

    actor = RolloutActor(policy={"_target_": "toys.LinearBinPolicy"},
                         env={"_target_": "toys.ReachEnv", "num_envs": 4, "group_size": 2},
                         device="cpu")
    env, seen = actor.envs[0], {}
    reset, step = env.reset, env.chunk_step

    def spy_reset(seed=None):
        seen["env"] = reset(seed)["image"]
        return {"image": seen["env"], "task": ["reach"] * 4}

    def spy_step(actions):
        seen["actions"] = actions
        return step(actions)

    def spy_sample(obs, temperature, generator=None):
        seen["policy"] = obs["image"]
        return LinearBinPolicy.sample(actor.policy, obs, temperature, generator)

    env.reset, env.chunk_step, actor.policy.sample = spy_reset, spy_step, spy_sample
    assert actor.reset(0, seed=1) is None  # nothing leaves the actor
    actions, record = actor.sample(0, None, 1.0, seed=2)
    assert actions is None and seen["policy"] is seen["env"]
    obs, step_record = actor.chunk_step(0, None)
    assert obs is None and isinstance(seen["actions"], torch.Tensor)
    assert record["image"].shape == (4, 8, 8, 3) and step_record["rewards"].shape == (4, 8)
    assert isinstance(env, ReachEnv)


def _dm(placement, **kw):
    base = dict(policy={"_target_": "toys.LinearBinPolicy"},
                env={"_target_": "toys.ReachEnv", "tolerance": 0.52}, num_envs=8, group_size=4,
                max_episode_steps=16, chunk=8, temperature=1.0, placement=placement,
                pipeline_stages=2 if placement == "hybrid" else 1, worker_cpus=0.2,
                compute_on_cpu=True, seed=5)
    return RolloutDataModule(**{**base, **kw})


CASES = {  # placement -> (DataModule overrides, device each role resolves on rank r,
    #                        the (resource, id) pairs Ray hands out, the ranks started)
    "collocated": ({}, {"collocated": "cuda:{r}"}, [], (0, 1)),
    # one rank of the two (3 actors: each takes seconds to start; whole cards are distinct
    # across ranks in the hybrid case's NPUs): 2 policy actors, 2 cards, a gloo group of 3
    "disaggregated": ({"env_resources": {"render": 1}, "policy_resources": {"GPU": 1},
                       "num_rollout_workers": 2, "weight_sync": {"transport": "gloo"}},
                      {"env": "cpu", "policy": "cuda:0"}, [("GPU", "0"), ("GPU", "1")], (0,)),
    "hybrid": ({"env_resources": {"GPU": 0.5}, "policy_resources": {"NPU": 1}},
               {"env": "cuda:0", "policy": "npu:0"},  # two halves of one card; 2 NPUs
               [("GPU", "0"), ("GPU", "0"), ("NPU", "0"), ("NPU", "1")], (0, 1)),
}


@pytest.mark.slow
@pytest.mark.fake_resources
@pytest.mark.parametrize("placement", list(CASES))
def test_two_ranks_place_actors_by_resources(ray_local, placement):
    ray = ray_local
    overrides, want, cards, ranks = CASES[placement]
    dms = [_dm(placement, **overrides) for _ in ranks]
    try:
        # trainer ranks of one two-rank job on one node, card r each, starting at the same
        # time (as their processes do; and their actors' starts share the CPUs)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda r: dms[r].start(rank=r, world_size=2,
                                                 trainer_device=f"cuda:{r}"), ranks))
        reports = [dm.placement_report() for dm in dms]
        node = ray.get_runtime_context().get_node_id()
        given = []
        for r, report in enumerate(reports):
            for info in report:
                role = "collocated" if placement == "collocated" else info["name"].split("-")[0]
                assert info["device"] == want[role].format(r=r), info
                assert info["compute_device"] == "cpu"
                if placement == "collocated":  # no card from Ray; on the trainer's node
                    assert info["accelerator_ids"] == {} and info["node_id"] == node
                given += [(k, i) for k, ids in info["accelerator_ids"].items() for i in ids]
        assert sorted(given) == cards
        # the placed actors roll out, and take weights (gloo group: trainer + 2 actors)
        policy = dms[0].layout.policy_actors[0]
        weights = {k: v + 0.25 for k, v in ray.get(policy.get_state.remote()).items()}
        weights = {k: torch.from_numpy(v) for k, v in weights.items()}
        for dm in dms:
            dm.sync_weights(weights, version=3)
            batch = dm.rollout()
            assert batch.version == 3 and batch.tokens.shape == (8, 2, 56)
        for actor in dms[0].rollout_workers:
            got = ray.get(actor.get_state.remote())
            assert all(torch.equal(torch.tensor(got[k]), v) for k, v in weights.items())
        if placement == "disaggregated":
            assert len(dms[0].rollout_workers) == 2
            assert dms[0].sync.group is not None and dms[0].sync.group.size == 3
    finally:
        for dm in dms:
            dm.teardown()


@pytest.mark.slow
@pytest.mark.fake_resources
def test_missing_resource_fails_before_any_actor_starts(ray_local):
    dm = _dm("disaggregated", policy_resources={"GPU": 3})
    with pytest.raises(ConfigError, match="rollout.policy_resources.*GPU: 6 but the Ray "
                                          "cluster has GPU: 4"):
        dm.start(rank=0, world_size=2)
    assert dm.layout is None
    dm = _dm("hybrid", env_resources={"sim_node": 1})
    with pytest.raises(ConfigError, match="rollout.env_resources.*sim_node: 1 but the Ray "
                                          "cluster has sim_node: 0"):
        dm.start()


@pytest.mark.fake_resources
def test_actors_that_cannot_be_placed_fail_by_the_timeout_and_are_removed(ray_local):
    """Both render units held elsewhere: the env actor waits, and after
    rollout.actor_start_timeout_s the start fails naming the key, what is free and the disk,
    and takes its pending actor away (else it would grab the units once they free up)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    held = placement_group([{"render": 2}])
    ray_local.get(held.ready())
    dm = _dm("collocated", env_resources={"render": 1}, actor_start_timeout_s=2.0)
    try:
        with pytest.raises(RuntimeError, match=r"actor_start_timeout_s=2.0: .*'render': 2.0.*"
                                               r"GiB free of"):
            dm.start()
        assert dm.pool.layout is None
    finally:
        remove_placement_group(held)
    deadline = time.monotonic() + 10
    while ray_local.available_resources().get("render", 0) < 2:
        assert time.monotonic() < deadline, "the pending actor took a render unit"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_step_needs_no_callback_and_offloads_around_a_rollout_on_its_card(
        tmp_path, ray_local, monkeypatch):
    """The step syncs the weights itself: a bare Trainer (no callback at all) ends with the
    same weights as the full fit. And where the rollout shares the trainer's card
    (collocated on an accelerator; the card is faked here, so the moves are CPU -> CPU) the
    trainer's weights and AdamW state leave the device during each rollout, in the step."""
    import lightning as L
    from test_fit_toy import toy_cfg

    from wmrl.fit import build_datamodule, build_module, fit
    from wmrl.schema import with_defaults

    # one collocated actor in both runs (an actor start costs seconds; the bare step takes
    # the same path on any placement, and they give the same batches: test_bootstrap_overlap)
    over = {"trainer.max_steps": 2, "rollout.placement": "collocated",
            "rollout.num_env_workers": 1, "rollout.worker_cpus": 0.25}
    bare_cfg = with_defaults(toy_cfg(tmp_path / "bare", **over))
    dm = build_datamodule(bare_cfg)
    # the bare run's actor starts while the full fit runs (what its Trainer's setup would do:
    # rank 0 of 1, on the CPU; setup then finds it started)
    with ThreadPoolExecutor(1) as pool:
        started = pool.submit(dm.start)
        try:
            monkeypatch.setattr(RolloutDataModule, "shares_trainer_device", lambda self: True)
            _, module = fit(toy_cfg(tmp_path / "fit", **over))
            monkeypatch.undo()
            # step 1 moves the weights (AdamW holds no state yet), step 2 also the state
            gb = [m["offload/gb"] for m in module.history]
            assert gb[0] > 0 and gb[1] > gb[0]
            assert all("onload/seconds" in m for m in module.history)
            assert not module._offloaded  # back on the device after the run
            started.result()
            L.seed_everything(bare_cfg.seed)
            bare = build_module(bare_cfg)
            trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, callbacks=[],
                                enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=tmp_path / "bare")
            trainer.fit(bare, datamodule=dm)
        finally:
            started.result()
            dm.teardown()
    assert bare.policy_version == 2 and dm.synced_version == 2
    assert "offload/gb" not in bare.history[0]
    want = module.policy.state_dict()
    assert all(torch.equal(v, want[k]) for k, v in bare.policy.state_dict().items())
    assert not torch.equal(want["bias"], torch.zeros_like(want["bias"]))  # it learned


def test_resource_overrides_compose_from_the_command_line():
    import os

    from hydra import compose, initialize_config_dir

    conf = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")
    with initialize_config_dir(conf, version_base="1.3"):
        cfg = compose("fit", overrides=["run_dir=/tmp/x", "rollout.policy_resources={GPU: 0.5}",
                                        "rollout.env_resources={render: 1}", "rollout.device=cuda"])
    assert cfg.rollout.policy_resources == {"GPU": 0.5}
    assert cfg.rollout.env_resources == {"render": 1}
    with pytest.raises(ConfigError, match="rollout.env_resources=\\{'render': 1\\} requests no GPU"):
        place.check_roles(cfg.rollout.device, cfg.rollout.placement,
                          {"env": cfg.rollout.env_resources, "policy": cfg.rollout.policy_resources})


def test_env_config_cannot_contradict_the_rollout_sizes():
    with pytest.raises(ConfigError, match="env.max_episode_steps=256 conflicts with the "
                                          "rollout's 16 \\(rollout.max_episode_steps\\)"):
        _dm("disaggregated", env={"_target_": "toys.ReachEnv", "max_episode_steps": 256})
    with pytest.raises(ConfigError, match="env.num_envs=8 conflicts with the rollout's "
                                          "4 per env worker"):
        _dm("disaggregated", env={"_target_": "toys.ReachEnv", "num_envs": 8},
            num_env_workers=2)
    dm = _dm("disaggregated", env={"_target_": "toys.ReachEnv", "group_size": 4})  # agrees
    assert dm.env_sizes == {"num_envs": 8, "group_size": 4, "chunk": 8, "max_episode_steps": 16}
