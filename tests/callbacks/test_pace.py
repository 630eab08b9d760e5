"""PACE (callbacks/pace.py): a real round - the tiny policy in the real tabletop simulator,
the tiny world model fine-tuned on those episodes, the weights pushed to a real Ray env actor
of a RolloutDataModule - plus the config group, the env's weight loader and the specs."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import ray
import torch
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir

from callbacks.pace import PaceCallback, episode_specs, trained_state
from wmrl.config import build, validate
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.pipeline import world_model_training as T
from wmrl.policies.openvla_oft import tiny_config
from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.world_model.action_wan import ActionWanModel

SIZE = 32
TASK = "red_on_plate"
STATS = {"action": {"q01": [-0.5] * 6 + [0.0], "q99": [0.5] * 6 + [1.0],
                    "mask": [True] * 6 + [False]}}
REWARD = {"_target_": "wmrl.rewards.resnet.ResNetSuccessReward", "round": False,
          "config": {"widths": [4, 4, 4, 4], "blocks_per_stage": 1, "image_size": [SIZE, SIZE]}}


def policy_spec() -> dict:
    cfg = tiny_config(image_size=SIZE)
    cfg["norm_stats"] = {"tabletop": STATS}
    return {"_target_": "wmrl.policies.openvla_oft.build_policy", "config": cfg,
            "unnorm_key": "tabletop"}


def tiny_world_model() -> ActionWanModel:
    """conf/train_world_model.yaml's VAE layout (16 ch, 8x), a 1-layer 16-wide DiT."""
    return ActionWanModel.from_config({
        "shift": 5.0, "init_seed": 0,
        "transformer": {"patch_size": [1, 1, 1], "num_attention_heads": 2,
                        "attention_head_dim": 8, "in_channels": 16, "out_channels": 16,
                        "text_dim": 32, "freq_dim": 64, "ffn_dim": 16, "num_layers": 1,
                        "rope_max_seq_len": 32},
        "vae": {"base_dim": 8, "z_dim": 16, "dim_mult": [1, 2, 2], "num_res_blocks": 1,
                "temperal_downsample": [True, True], "in_channels": 12, "out_channels": 12,
                "is_residual": True, "patch_size": 2, "scale_factor_spatial": 8,
                "latents_mean": [0.0] * 16, "latents_std": [1.0] * 16},
        "action": {"action_dim": 7, "actions_per_latent": 4, "num_text_tokens": 1}})


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("pace")
    tiny_world_model().save_pretrained(root / "wm")
    T.write_sim_initial_states(root / "init", [TASK], 2, eval_seed=0, image_size=SIZE)
    return root


def make_callback(assets, **kw) -> PaceCallback:
    args = dict(world_model={"path": str(assets / "wm"), "height": SIZE, "width": SIZE},
                tasks=[TASK], every_n_steps=2, episodes=4, steps=40, lr=3e-3, batch_size=8,
                num_states=8, num_envs=4, eval_clips=16, context_noise_sigma=0.0,
                sim_env={"image_size": SIZE, "max_episode_steps": 16,
                         "terminate_on_success": False},
                reward_steps=3, reward=REWARD, seed=5, verbose=False)
    args.update(kw)
    return PaceCallback(**args)


def test_episode_specs_fixed_and_random():
    fixed = [episode_specs(["red_on_plate", "red_left"], 4, r, "fixed", 3, 0) for r in (0, 1)]
    assert [(s.task, s.state_id) for s in fixed[0]] == [
        ("red_on_plate", 0), ("red_left", 0), ("red_on_plate", 1), ("red_left", 1)]
    assert [s.state_id for s in fixed[1]] == [2, 2, 0, 0]  # the next states, wrapping at 3
    rand = [s.seed for r in (0, 1) for s in episode_specs([TASK], 4, r, "random", 8, 3)]
    assert len(set(rand)) == 8 and all(s.state_id is None for r in (0, 1)
                                       for s in episode_specs([TASK], 4, r, "random", 8, 3))


def test_rounds_every_n_steps_but_not_after_the_last(assets):
    cb = make_callback(assets)  # every_n_steps=2
    assert [s for s in range(7) if cb.round_due(s, max_steps=6)] == [2, 4]
    assert [s for s in range(7) if cb.round_due(s, max_steps=-1)] == [2, 4, 6]  # unbounded
    cb.last_round_step = 4  # a resumed run does not repeat the round it checkpointed after
    assert not cb.round_due(4, max_steps=6)


def test_config_group_off_by_default_on_in_experiment():
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        default = compose("fit", overrides=["run_dir=/tmp/wmrl-test"])
        on = compose("fit", overrides=["run_dir=/tmp/wmrl-test", "experiment=pace"])
    assert default.get("pace") is None  # `make fit` is unchanged
    validate(on)
    assert (on.pace.every_n_steps, on.pace.episodes, on.pace.steps) == (5, 96, 300)
    cb = build(on.pace)  # nothing is loaded before the first round
    assert isinstance(cb, PaceCallback) and cb.model is None
    assert cb.world_model_cfg["path"] == on.env.world_model.path
    assert cb.tasks == [on.task.name] and cb.sim_env["image_size"] == list(on.task.image_size)


def test_env_loads_world_model_weights(assets):
    env = WanWorldModelEnv({"path": str(assets / "wm"), "height": SIZE, "width": SIZE},
                           lambda f, t: torch.zeros(f.shape[:2]), str(assets / "init"),
                           num_envs=2, group_size=1)
    new = tiny_world_model()
    with torch.no_grad():
        for p in new.transformer.parameters():
            p.add_(0.01)
    state = trained_state(new)
    with pytest.raises(ValueError, match="missing"):
        env.load_world_model_weights({k: v for k, v in state.items()
                                      if not k.startswith("action.")}, 1)
    assert getattr(env, "world_model_version", 0) == 0  # nothing copied
    assert env.load_world_model_weights(state, 3) == 3
    assert env.load_world_model_weights(state) == 4
    own = env.model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in state.items())
    env.reset(state_ids=[0, 1])
    env.chunk_step(torch.zeros(2, 8, 7))  # still runs


@pytest.mark.slow
def test_round_finetunes_and_pushes_to_a_real_env_actor(assets, ray_local, tmp_path):
    torch.manual_seed(0)
    cb = make_callback(assets)
    policy = build(policy_spec())
    dm = RolloutDataModule(
        policy=policy_spec(),
        env={"_target_": "wmrl.envs.wan_env.WanWorldModelEnv",
             "world_model": {"path": str(assets / "wm"), "height": SIZE, "width": SIZE},
             "reward": REWARD, "initial_states": str(assets / "init")},
        num_envs=2, group_size=1, max_episode_steps=8, chunk=8, temperature=1.0,
        placement="collocated", worker_cpus=0.25, worker_threads=1, seed=0)
    dm.setup("fit")
    logged = []
    trainer = SimpleNamespace(global_step=1, max_steps=6, datamodule=dm, world_size=1,
                              is_global_zero=True,
                              default_root_dir=str(tmp_path))
    module = SimpleNamespace(policy=policy, device=torch.device("cpu"),
                             log_dict=lambda m, **kw: logged.append(dict(m)))
    try:
        actor = dm.plan.env_actors[0]
        original = ray.get(actor.env_model_state.remote())
        assert dm.world_model_versions() == [0]

        cb.on_train_batch_end(trainer, module, None, None, 0)  # step 1: no round
        assert cb.rounds == 0 and logged[-1]["pace/real_episodes"] == 0.0
        trainer.global_step = 2
        cb.on_train_batch_end(trainer, module, None, None, 1)  # step 2: a round
        row = cb.history[-1]

        # the episodes: real, from the simulator, all counted and logged
        assert row["episodes"] == 4 and row["steps"] > 0 and cb.real_steps == row["steps"]
        assert logged[-1]["pace/real_episodes"] == 4.0
        assert logged[-1]["pace/real_steps"] == float(row["steps"])
        assert logged[-1]["pace/world_model_version"] == 1.0
        assert "pace/finetune_loss" in logged[-1] and logged[-1]["pace/seconds"] > 0
        assert (tmp_path / "pace" / "history.jsonl").read_text().count("\n") == 1
        # the fine-tune learned the policy's episodes
        assert len(cb.losses) == 40 and row["finetune_loss"] < row["finetune_loss_first"]
        assert row["wm_loss_after"] < row["wm_loss_before"]
        assert len(cb.reward_losses) == 3

        # the env actor holds exactly the callback's weights, as version 1
        assert dm.world_model_versions() == [1]
        held = ray.get(actor.env_model_state.remote())
        ours = trained_state(cb.model)
        assert all(torch.equal(held["world_model"][k], v) for k, v in ours.items())
        assert not all(torch.equal(original["world_model"][k], v) for k, v in ours.items())
        vae = [k for k in original["world_model"] if k.startswith("vae.")]
        assert vae and all(torch.equal(held["world_model"][k], original["world_model"][k])
                           for k in vae)  # the VAE stays frozen
        assert all(torch.equal(held["reward"][k], v) for k, v in cb.reward_state().items())

        # GRPO goes on: a rollout in the updated world model
        dm.sync_weights(policy.state_dict(), 0)
        batch = dm.rollout()
        assert batch.version == 0 and batch.rewards.shape == (2, 8)

        # resume: the checkpointed state continues the counts and the fine-tuned weights
        path = tmp_path / "cb.pt"
        torch.save(cb.state_dict(), path)
        cb2 = make_callback(assets)
        cb2.load_state_dict(torch.load(path, weights_only=True))
        cb2.on_train_start(trainer, module)  # pushes version 1 again
        assert (cb2.version, cb2.real_episodes, cb2.real_steps) == (1, 4, row["steps"])
        assert cb2.model is None  # built at its first round; a checkpoint before keeps them
        assert all(torch.equal(v, ours[k]) for k, v in cb2.state_dict()["world_model"].items())
        cb2.ensure_models()
        assert all(torch.equal(v, ours[k]) for k, v in trained_state(cb2.model).items())
        assert cb2.optimizer.state_dict()["state"]  # Adam moments restored
        assert dm.world_model_versions() == [1]
        cb2.on_train_end(trainer, module)
        assert '"real_episodes": 4' in (tmp_path / "pace" / "summary.json").read_text()
    finally:
        dm.teardown()
    assert os.path.isdir(assets / "wm")
