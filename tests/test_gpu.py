"""Device checks on a real CUDA card (``make gpu-check`` runs them with WMRL_REAL_DEVICES=1;
skipped elsewhere): collocated roles take turns on the card, weights reach a collocated actor
through CUDA IPC bit for bit, and a rollout runs with the observation kept on the device."""

import os

import pytest
import torch
from hydra import compose, initialize_config_dir

from wmrl.build import build, to_container
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.rollout.workers import RolloutActor

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def tiny_parts():
    with initialize_config_dir(CONF, version_base="1.3"):
        cfg = compose("fit", overrides=["run_dir=/tmp/wmrl-gpu", "policy=openvla_oft_tiny",
                                        "env=wan_tiny", "reward=resnet"])
    env = dict(to_container(cfg.env), reward=to_container(cfg.reward))
    return to_container(cfg.policy), env


def on(module: torch.nn.Module) -> str:
    return next(module.parameters()).device.type


def test_collocated_roles_take_turns_on_the_card():
    policy, env = tiny_parts()
    env.update(num_envs=4, group_size=2, chunk=8, max_episode_steps=16)
    actor = RolloutActor(policy=policy, env=env, device="auto", shared_device="cuda:0")
    assert actor.device == torch.device("cuda:0") and actor.offload_idle
    wm = actor.envs[0].model
    assert actor.reset(0, seed=0) is None  # env's turn: the policy left the card
    assert on(actor.policy) == "cpu" and on(wm) == "cuda"
    assert actor.last_obs[0]["image"].device.type == "cuda"  # the obs stays on the card
    actions, record = actor.sample(0, None, 1.0, seed=1)
    assert actions is None and on(actor.policy) == "cuda" and on(wm) == "cpu"
    assert actor.last_actions[0].device.type == "cuda"
    actor.chunk_step(0, None)
    assert on(actor.policy) == "cpu" and on(wm) == "cuda"
    actor.rest()  # the trainer's turn
    assert on(actor.policy) == "cpu" and on(wm) == "cpu"
    assert actor.memory_stats()["peak_bytes"] > 0


def test_ipc_weight_sync_to_collocated_actor_is_bit_exact(ray_local):
    ray = ray_local
    policy, env = tiny_parts()
    dm = RolloutDataModule(policy=policy, env=env, num_envs=8, group_size=4,
                           max_episode_steps=16, chunk=8, temperature=1.0,
                           placement="collocated", worker_cpus=0.5,
                           weight_sync={"transport": "device"})
    dm.start(trainer_device="cuda:0")
    try:
        assert dm.sender.transport == "ipc"
        trainer_policy = build(policy).to("cuda:0")
        with torch.no_grad():
            for p in trainer_policy.parameters():
                p.add_(0.01)
        state = trainer_policy.state_dict()
        dm.sync_weights(state, version=4)
        assert dm.sender.transport == "ipc"  # no fallback happened
        got = ray.get(dm.rollout_workers[0].get_state.remote())
        for k, v in state.items():
            assert torch.equal(torch.from_numpy(got[k].copy()), v.cpu()), k
        batch = dm.rollout()
        assert batch.version == 4 and batch.image.shape[:2] == (8, 2)
        info = dm.placement_report()[0]
        assert info["device"] == "cuda:0" and info["compute_device"] == "cuda:0"
    finally:
        dm.teardown()
