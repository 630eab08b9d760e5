"""PACE (wmrl/pace/round.py): a real round - the tiny policy in the real tabletop
simulator, the tiny world model fine-tuned on those episodes, the weights pushed to a real Ray
env actor of a RolloutDataModule - driven directly and through a real fit (GRPOModule's
training step, the checkpoint, a resume); plus the config group, the env's weight loader, the
specs and the checkpoints written when PACE was a callback."""

from __future__ import annotations

import json
import os

import lightning as L
import pytest
import ray
import torch
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_fit_toy import toy_cfg
from tiny_models import tiny_world_model

from wmrl.build import build
from wmrl.config import ConfigError, validate
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.finetune import world_model as T
from wmrl.fit import build_module, fit
from wmrl.module import GRPOModule
from wmrl.pace.round import Pace, episode_specs, trained_state
from wmrl.policies.configs import tiny_config
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


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread in this process (the fine-tunes, the fit's trainer): at these sizes a
    second thread only waits for the first, ~10x slower on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("pace")
    tiny_world_model().save_pretrained(root / "wm")
    T.write_sim_initial_states(root / "init", [TASK], 2, eval_seed=0, image_size=SIZE)
    return root


def pace_args(assets, **kw) -> dict:
    args = dict(world_model={"path": str(assets / "wm"), "height": SIZE, "width": SIZE},
                tasks=[TASK], every_n_steps=2, episodes=4, steps=40, lr=3e-3, batch_size=8,
                num_states=8, num_envs=4, eval_clips=16, context_noise_sigma=0.0,
                sim_env={"image_size": SIZE, "max_episode_steps": 16,
                         "terminate_on_success": False},
                reward_steps=3, reward=REWARD, seed=5, verbose=False)
    args.update(kw)
    return args


def make_pace(assets, **kw) -> Pace:
    return Pace(**pace_args(assets, **kw))


def test_episode_specs_fixed_and_random():
    fixed = [episode_specs(["red_on_plate", "red_left"], 4, r, "fixed", 3, 0) for r in (0, 1)]
    assert [(s.task, s.state_id) for s in fixed[0]] == [
        ("red_on_plate", 0), ("red_left", 0), ("red_on_plate", 1), ("red_left", 1)]
    assert [s.state_id for s in fixed[1]] == [2, 2, 0, 0]  # the next states, wrapping at 3
    rand = [s.seed for r in (0, 1) for s in episode_specs([TASK], 4, r, "random", 8, 3)]
    assert len(set(rand)) == 8 and all(s.state_id is None for r in (0, 1)
                                       for s in episode_specs([TASK], 4, r, "random", 8, 3))


def test_rounds_every_n_steps_but_not_after_the_last(assets):
    pace = make_pace(assets)  # every_n_steps=2
    assert [s for s in range(7) if pace.round_due(s, max_steps=6)] == [2, 4]
    assert [s for s in range(7) if pace.round_due(s, max_steps=-1)] == [2, 4, 6]  # unbounded
    pace.ledger.last_round_step = 4  # a resumed run does not repeat the round it checkpointed after
    assert not pace.round_due(4, max_steps=6)


def test_bad_settings_are_refused_before_the_fit(assets):
    """The config check (wmrl.schema.PaceSchema) refuses them; the constructor takes its
    settings through PaceConfig (ranges, choices, unknown keys) and checks what needs more
    than one key."""
    for override, match in [("pace.buffer_rounds=0", r"pace.buffer_rounds=0 is not allowed"),
                            ("pace.scenes=foo", r"pace.scenes: Invalid value 'foo'"),
                            ("pace.reward_frames=sim", r"pace.reward_frames: Invalid value 'sim'"),
                            ("pace.reward_holdout=1.0", r"pace.reward_holdout=1.0 is not allowed")]:
        with initialize_config_dir(CONF_DIR, version_base="1.3"):
            cfg = compose("fit", overrides=["run_dir=/tmp/wmrl-test", "experiment=pace",
                                            override])
        with pytest.raises(ConfigError, match=match):
            validate(cfg)
    with pytest.raises(ValueError, match="pace.tasks is empty"):
        make_pace(assets, tasks=[])
    with pytest.raises(ValueError, match="needs the reward config"):
        make_pace(assets, reward=None)  # reward_steps=3
    for kw, match in [({"scenes": "Fixed"}, r"pace.scenes='Fixed' is not allowed: one of"),
                      ({"buffer_rounds": 0}, r"pace.buffer_rounds=0 is not allowed"),
                      ({"episode": 4}, r"pace.episode: not a setting of the pace")]:
        with pytest.raises(ConfigError, match=match):
            make_pace(assets, **kw)


def test_config_group_off_by_default_on_in_experiment():
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        default = compose("fit", overrides=["run_dir=/tmp/wmrl-test"])
        on = compose("fit", overrides=["run_dir=/tmp/wmrl-test", "experiment=pace"])
    assert default.get("pace") is None  # `make fit` is unchanged
    validate(on)
    assert (on.pace.every_n_steps, on.pace.episodes, on.pace.steps) == (5, 96, 300)
    # the reward's replays use the env's verdict threshold and denoising steps
    assert (on.pace.reward_frames, on.pace.success_threshold, on.pace.num_inference_steps) == (
        "real", on.env.success_threshold, on.env.num_inference_steps)
    assert "pace" not in on.callbacks  # the training step runs it, no callback
    # GRPOModule builds it (fit.build_module); nothing is loaded before the first round
    on.policy = {"_target_": "toys.LinearBinPolicy"}
    pace = build_module(on).pace
    assert isinstance(pace, Pace) and pace.model is None and pace.reward is None
    assert pace.world_model_cfg["path"] == on.env.world_model.path
    assert pace.tasks == [on.task.name] and pace.sim_env["image_size"] == list(on.task.image_size)
    assert pace.ledger.out_dir == "/tmp/wmrl-test/pace" and pace.reward_spec == \
        OmegaConf.to_container(on.reward, resolve=True)  # built only for reward_steps > 0
    default.policy = on.policy
    assert build_module(default).pace is None


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


def test_round_finetunes_counts_and_resumes(assets, tmp_path):
    """A round driven directly: real episodes, the fine-tune, the counts, the history; its
    state through a checkpoint. No env actors here (``rollouts=None``: nothing to push); the
    push to real Ray env actors - exactly these weights, the VAE untouched, the reward's too,
    a rollout after it, the restored version pushed on resume - is checked in the fit below,
    which runs the same round from the training step."""
    torch.manual_seed(0)
    pace = make_pace(assets, out_dir=str(tmp_path / "pace"))
    policy = build(policy_spec())
    assert pace.ledger.counts()["pace/real_episodes"] == 0.0

    assert not pace.round_due(1, max_steps=6) and pace.round_due(2, max_steps=6)
    metrics = pace.run_round(policy, None, step=2)
    row = pace.ledger.history[-1]

    # the episodes: real, from the simulator, all counted
    assert row["episodes"] == 4 and row["steps"] > 0 and pace.ledger.real_steps == row["steps"]
    counts = pace.ledger.counts()
    assert counts["pace/real_episodes"] == 4.0 and counts["pace/real_steps"] == row["steps"]
    assert counts["pace/world_model_version"] == 1.0 and row["push_seconds"] == 0.0
    assert metrics["pace/wm_loss_after"] == row["wm_loss_after"] and metrics["pace/seconds"] > 0
    assert (tmp_path / "pace" / "history.jsonl").read_text().count("\n") == 1
    # the fine-tune learned the policy's episodes
    assert len(pace.losses) == 40 and row["finetune_loss"] < row["finetune_loss_first"]
    assert row["wm_loss_after"] < row["wm_loss_before"]
    assert len(pace.reward_losses) == 3
    ours = trained_state(pace.model)
    loaded = trained_state(ActionWanModel.from_pretrained(assets / "wm"))
    assert not all(torch.equal(loaded[k], v) for k, v in ours.items())  # it moved
    assert all(not p.requires_grad for p in pace.model.parameters())  # frozen between rounds

    # resume: the checkpointed state continues the counts and the fine-tuned weights
    path = tmp_path / "pace.pt"
    torch.save(pace.state_dict(), path)
    pace2 = make_pace(assets, out_dir=str(tmp_path / "pace"))
    pace2.load_state_dict(torch.load(path, weights_only=True))
    ledger2 = pace2.ledger
    assert (ledger2.version, ledger2.real_episodes, ledger2.real_steps) == (1, 4, row["steps"])
    assert pace2.model is None  # built at its first round; a checkpoint before keeps them
    assert all(torch.equal(v, ours[k]) for k, v in pace2.state_dict()["world_model"].items())
    pace2.ensure_models()
    assert all(torch.equal(v, ours[k]) for k, v in trained_state(pace2.model).items())
    assert pace2.optimizer.state_dict()["state"]  # Adam moments restored
    assert all(torch.equal(v, pace.reward_state()[k]) for k, v in pace2.reward_state().items())
    assert not pace2.round_due(2, max_steps=6) and pace2.round_due(4, max_steps=6)
    assert pace2.finish()["real_episodes"] == 4
    assert '"real_episodes": 4' in (tmp_path / "pace" / "summary.json").read_text()
    assert os.path.isdir(assets / "wm")


def test_round_with_own_context_replays_the_rounds_episodes(assets, monkeypatch):
    """own_context_fraction=0.5: every own_context_refresh=20 of the 40 steps (steps 0 and
    20) own_context_episodes=2 of the round's 4 episodes are replayed through the model being
    fine-tuned; the same round without it replays nothing and learns otherwise."""
    import wmrl.finetune.world_model_module as M

    calls = []

    def spy(model, episodes, num_inference_steps, seed):
        calls.append((model, [len(e) for e in episodes], num_inference_steps))
        return own_context_clips(model, episodes, num_inference_steps, seed)

    own_context_clips = M.own_context_clips
    monkeypatch.setattr(M, "own_context_clips", spy)
    policy = build(policy_spec())
    losses = {}
    for frac in (0.0, 0.5):
        torch.manual_seed(0)
        pace = make_pace(assets, reward_steps=0, num_inference_steps=2,
                         own_context_fraction=frac, own_context_refresh=20,
                         own_context_episodes=2)
        episodes = pace.collect(policy, 0)
        pace.collect = lambda policy, r, eps=episodes: eps
        pace.run_round(policy, None, step=2)
        losses[frac] = pace.losses
        lengths = sorted(len(e) for e in episodes)
        if frac:
            assert len(calls) == 2 and all(c[0] is pace.model and c[2] == 2 for c in calls)
            assert all(len(c[1]) == 2 and set(c[1]) <= set(lengths) for c in calls)
        else:
            assert calls == []
    assert len(losses[0.5]) == 40 and losses[0.5] != losses[0.0]
    with pytest.raises(ConfigError, match=r"pace.own_context_fraction=1.0 is not allowed"):
        make_pace(assets, own_context_fraction=1.0)


def test_the_checkpoint_restores_the_ledger_and_weights(assets):
    """GRPOModule saves and restores PACE's state under ``"pace"``: the ledger (budget, world
    model version, history) and the fine-tuned weights."""
    spec = {"_target_": "wmrl.pace.round.Pace", **pace_args(assets)}
    weights = trained_state(tiny_world_model())
    state = {"version": 2, "rounds": 2, "real_episodes": 8, "real_steps": 96,
             "real_successes": 3, "seconds": 12.5, "last_round_step": 4,
             "history": [{"round": 0}, {"round": 1}], "world_model": weights,
             "optimizer": None, "reward": None, "reward_optimizer": None}
    module = GRPOModule({"_target_": "toys.LinearBinPolicy"}, group_size=2, temperature=1.0,
                        pace=spec)
    module.on_load_checkpoint({"policy_version": 6, "shuffle_rng": module.shuffle.get_state(),
                               "pace": state})
    pace, ledger = module.pace, module.pace.ledger
    assert (ledger.version, ledger.rounds, ledger.real_episodes, ledger.real_steps) == (
        2, 2, 8, 96)
    assert ledger.last_round_step == 4 and not pace.round_due(4) and pace.round_due(6)
    assert pace.current_state()[0] is weights  # pushed at the start, loaded at the build
    saved = {}
    module.on_save_checkpoint(saved)
    assert saved["pace"]["version"] == 2 and saved["pace"]["world_model"] is weights
    module = GRPOModule({"_target_": "toys.LinearBinPolicy"}, group_size=2, temperature=1.0,
                        pace=spec)
    module.on_load_checkpoint({"policy_version": 6, "shuffle_rng": module.shuffle.get_state()})
    assert module.pace.ledger.version == 0  # a checkpoint of a run without PACE: it starts fresh


class PaceProbe(L.Callback):
    """The env actors' world-model versions, and the first env actor's world-model and reward
    weights, at the first batch (after on_train_start) and at the end of the fit (before the
    actors stop)."""

    @staticmethod
    def held(trainer) -> tuple[list[int], dict]:
        dm = trainer.datamodule
        return dm.world_model_versions(), ray.get(dm.layout.env_actors[0].env_model_state.remote())

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if not hasattr(self, "first"):
            self.first, self.first_state = self.held(trainer)

    def on_train_end(self, trainer, pl_module):
        self.last, self.last_state = self.held(trainer)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], v) for k, v in b.items())


def fit_cfg(assets, run_dir, **over):
    """tests/test_fit_toy.py's fit with the tiny policy, world model and reward, and PACE:
    a round after every step (2 episodes, 6 fine-tune steps, 2 reward steps on the refined
    world model's replays of the episodes, one of them held out)."""
    wm = {"path": str(assets / "wm"), "height": SIZE, "width": SIZE}
    cfg = toy_cfg(run_dir, **{"trainer.max_steps": 2})
    cfg.policy = policy_spec()
    cfg.env = {"_target_": "wmrl.envs.wan_env.WanWorldModelEnv", "world_model": wm,
               "initial_states": str(assets / "init"), "use_rel_reward": True}
    cfg.reward = REWARD
    cfg.rollout = {**cfg.rollout, "num_envs": 4, "group_size": 2, "max_episode_steps": 8,
                   "placement": "collocated", "num_env_workers": 1, "worker_cpus": 0.25}
    cfg.algorithm = {**cfg.algorithm, "global_batch": 4, "micro_batch": 2,
                     "filter_groups": False, "lr": 1e-3}
    cfg.pace = {"_target_": "wmrl.pace.round.Pace", **pace_args(
        assets, every_n_steps=1, episodes=2, steps=6, batch_size=4, eval_clips=8,
        num_envs=2, context_noise_sigma=0.1, reward_steps=2, verbose=True,
        reward_frames="imagined", reward_holdout=0.5, success_threshold=0.5,
        sim_env={"image_size": SIZE, "max_episode_steps": 12, "terminate_on_success": False},
        out_dir="${run_dir}/pace")}
    for k, v in over.items():
        OmegaConf.update(cfg, k, v)
    return cfg


@pytest.mark.slow
def test_fit_runs_rounds_in_the_training_step_and_resumes(assets, ray_local, tmp_path,
                                                          capsys):
    """2 steps: a round after step 1 (none after the last); the resume to step 4 pushes the
    checkpointed world model to the new actors and runs a round after step 3 (none after
    step 2: the run before took its place; none after step 4, the last)."""
    probe = PaceProbe()
    trainer, module = fit(fit_cfg(assets, tmp_path / "a"), extra_callbacks=[probe])
    pace = module.pace
    assert trainer.global_step == 2 and (pace.ledger.rounds, pace.ledger.version) == (1, 1)
    assert [r["step"] for r in pace.ledger.history] == [1]
    assert (probe.first, probe.last) == ([0], [1])
    # the step's metrics: the budget every step, the round's numbers after step 1
    first, second = module.history
    assert first["pace/real_episodes"] == second["pace/real_episodes"] == 2.0
    assert first["pace/wm_loss_after"] == pace.ledger.history[0]["wm_loss_after"]
    assert "pace/wm_loss_after" not in second and second["pace/world_model_version"] == 1.0
    # the reward's scores on the held-out episode's replay, before and after its fine-tune
    assert pace.ledger.history[0]["reward_held_out_episodes"] == 1
    assert 0 <= first["pace/reward_episode_recall_after"] <= 1
    assert first["pace/reward_episode_wm_success_before"] in (0.0, 1.0)
    assert "pace/wm_loss_after" in (tmp_path / "a" / "csv" / "version_0" /
                                    "metrics.csv").read_text()
    out = capsys.readouterr().out
    assert "[pace] step 1: round 0 -> world model v1: 2 real episodes" in out
    assert "reward on held-out replays: precision" in out
    # the state is the module's, in the checkpoint under "pace", not a callback's
    ckpt = tmp_path / "a" / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=True)
    assert saved["pace"]["version"] == 1 and saved["pace"]["real_episodes"] == 2
    assert not any(str(k).startswith("PaceCallback") for k in saved["callbacks"])
    ours = trained_state(pace.model)
    assert same(saved["pace"]["world_model"], ours)
    assert json.loads((tmp_path / "a" / "pace" / "summary.json").read_text())[
        "real_episodes"] == 2
    # the env actor holds exactly the round's weights (the run's step 2 rolled out in them):
    # the transformer and action modules moved, the VAE stayed as loaded, the reward synced
    loaded, held = probe.first_state["world_model"], probe.last_state["world_model"]
    assert same({k: held[k] for k in ours}, ours)
    assert not same({k: loaded[k] for k in ours}, ours)
    vae = [k for k in loaded if k.startswith("vae.")]
    assert vae and all(torch.equal(held[k], loaded[k]) for k in vae)
    assert same(probe.last_state["reward"], pace.reward_state())
    assert not same(probe.first_state["reward"], pace.reward_state())

    probe2 = PaceProbe()
    trainer2, module2 = fit(fit_cfg(assets, tmp_path / "b", ckpt_path=str(ckpt),
                                    **{"trainer.max_steps": 4}), extra_callbacks=[probe2])
    pace2 = module2.pace
    assert trainer2.global_step == 4 and (pace2.ledger.rounds, pace2.ledger.version) == (2, 2)
    assert (probe2.first, probe2.last) == ([1], [2])  # restored before the first rollout
    # what the new actors got on resume: the checkpoint's weights, not the config's
    first = probe2.first_state
    assert same({k: first["world_model"][k] for k in ours}, saved["pace"]["world_model"])
    assert same(first["reward"], saved["pace"]["reward"])
    assert [r["step"] for r in pace2.ledger.history] == [1, 3] and pace2.ledger.real_episodes == 4
    assert "[pace] resumed at world-model version 1" in capsys.readouterr().out
    rows = (tmp_path / "b" / "pace" / "history.jsonl").read_text().splitlines()
    assert [json.loads(r)["round"] for r in rows] == [1]
