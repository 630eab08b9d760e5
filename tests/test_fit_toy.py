"""The real trainer machinery (Lightning + Ray + GRPO) on the hand-checkable toy problem."""

import glob
import os

import lightning as L
import pytest
import ray
import torch
from conftest import CONF_DIR
from omegaconf import OmegaConf

from wmrl.config import ConfigError
from wmrl.fit import fit


def toy_cfg(tmp_path, **over):
    cfg = OmegaConf.create({
        "seed": 0,
        "ckpt_path": None,
        "run_dir": str(tmp_path),
        "checkpoint": {"every_n_steps": 1, "keep_last": 0},
        "policy": {"_target_": "toys.LinearBinPolicy"},
        "env": {"_target_": "toys.ReachEnv"},
        "reward": None,
        "rollout": {"num_envs": 16, "group_size": 4, "rollout_epochs": 1,
                    "max_episode_steps": 16, "chunk": 8, "temperature": 1.0,
                    # one actor (env and policy), as each actor start costs seconds of CPU;
                    # the traced fit below runs separate env and policy actors
                    "placement": "collocated", "pipeline_stages": 1,
                    "num_env_workers": 1, "num_rollout_workers": 1, "worker_cpus": 0.5,
                    "worker_threads": 1, "ray_address": None, "ray_num_cpus": None,
                    # under pytest's 600 s: a start that hangs says why (the free resources)
                    "actor_start_timeout_s": 300.0,
                    "weight_sync": {"bucket_mb": 1, "delta": True, "zero_copy": True}},
        "algorithm": {"lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                      "grad_clip": 10.0, "clip_low": 0.2, "clip_high": 0.28,
                      "dual_clip": None, "aggregation": "traj-mean",
                      "advantage_scale": "group", "filter_groups": True,
                      "global_batch": 32, "micro_batch": 8, "update_epochs": 1,
                      "gradient_accumulation": True},
        "strategy": {"_target_": "lightning.pytorch.strategies.SingleDeviceStrategy",
                     "device": "cpu"},
        "trainer": {"accelerator": "cpu", "devices": 1, "max_steps": 3,
                    "log_every_n_steps": 1, "enable_progress_bar": False,
                    "enable_model_summary": False},
        "logger": {"_target_": "lightning.pytorch.loggers.CSVLogger",
                   "save_dir": str(tmp_path), "name": "csv"},
    })
    cfg.env = {"_target_": "toys.ReachEnv", "tolerance": 0.5}
    # the fit's callbacks (conf/callbacks/default.yaml) without the tabletop's sim eval
    cfg.tracing = {"enabled": False}
    cfg.callbacks = OmegaConf.load(os.path.join(CONF_DIR, "callbacks", "default.yaml"))
    cfg.callbacks.sim_eval = None
    for k, v in over.items():
        OmegaConf.update(cfg, k, v)
    return cfg


def test_bad_config_fails_before_ray(tmp_path, monkeypatch):
    def no_ray(*a, **k):
        raise AssertionError("Ray must not start for a bad config")

    monkeypatch.setattr(ray, "init", no_ray)
    with pytest.raises(ConfigError, match="rollout.num_envs=10.*group_size=4"):
        fit(toy_cfg(tmp_path, **{"rollout.num_envs": 10}))
    with pytest.raises(ConfigError, match="algorithm.global_batch=30"):
        fit(toy_cfg(tmp_path, **{"algorithm.global_batch": 30}))
    with pytest.raises(ConfigError, match="ckpt_path=/nope.ckpt"):
        fit(toy_cfg(tmp_path, ckpt_path="/nope.ckpt"))
    # the policy decodes 8 actions a call: a rollout of 4-action chunks is refused here
    with pytest.raises(ConfigError, match=r"rollout.chunk=4 but the policy decodes chunks of 8"):
        fit(toy_cfg(tmp_path, **{"rollout.chunk": 4}))


class WorkerProbe(L.Callback):
    """Reads the rollout worker's version and weights at the end of training."""

    def on_train_end(self, trainer, pl_module):
        worker = trainer.datamodule.rollout_workers[0]
        self.version = ray.get(worker.get_version.remote())
        self.state = ray.get(worker.get_state.remote())


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory, ray_local):
    """One 3-step toy fit, traced, with the worker probed at the end: (trainer, module, probe,
    run dir). Its resume is tests/test_resume.py's."""
    run_dir = tmp_path_factory.mktemp("three_steps")
    probe = WorkerProbe()
    trainer, module = fit(toy_cfg(run_dir, **{
        "tracing": {"enabled": True}, "rollout.placement": "disaggregated",
        "rollout.num_env_workers": 2}),
                          extra_callbacks=[probe])
    return trainer, module, probe, run_dir


def test_fit_runs_and_syncs_weights(three_steps):
    trainer, module, probe, tmp_path = three_steps
    assert trainer.global_step == 3 and module.policy_version == 3
    # the rollout worker holds version 3 and exactly the trainer's final weights
    assert probe.version == 3
    for name, value in module.policy.state_dict().items():
        assert torch.equal(torch.from_numpy(probe.state[name]), value), name
    assert module.policy.bias.abs().sum() > 0  # and training did move them
    import math

    trained = [h for h in module.history if "train/loss" in h]
    assert trained
    for h in trained:  # device-side metric sums come back as sane means
        assert 0.0 <= h["train/clip_fraction"] <= 1.0 and h["train/approx_kl"] >= 0.0
        assert 0.0 < h["train/entropy"] <= math.log(256) + 1e-4
        assert h["train/ratio_max"] >= 1.0 - 1e-6 and h["train/optimizer_steps"] >= 1
    ckpt = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    assert os.path.exists(ckpt) and not glob.glob(str(tmp_path / "checkpoints" / "*.tmp*"))
    saved = torch.load(ckpt, weights_only=True)
    assert saved["policy_version"] == 3 and saved["global_step"] == 3
    metrics = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    assert "rollout/success" in metrics and "train/clip_fraction" in metrics


def test_grpo_raises_success_on_reach(tmp_path, ray_local):
    """Random policy succeeds ~30%; GRPO must push it well above that."""
    _, module = fit(toy_cfg(tmp_path, **{"trainer.max_steps": 30, "rollout.num_envs": 32,
                                         "algorithm.global_batch": 64, "algorithm.lr": 0.1}))
    hist = [m["rollout/success"] for m in module.history]
    first, last = sum(hist[:3]) / 3, sum(hist[-5:]) / 5
    assert first < 0.5 and last > first + 0.3, hist


def test_batch_without_informative_group_counts_a_step_but_keeps_weights(tmp_path, ray_local):
    """tolerance 10: every episode succeeds, every group has zero variance."""
    cfg = toy_cfg(tmp_path, **{"trainer.max_steps": 2, "env.tolerance": 10.0})
    trainer, module = fit(cfg)
    assert trainer.global_step == 2 and [m["rollout/success"] for m in module.history] == [1.0, 1.0]
    assert module.policy.bias.abs().sum() == 0 and module.policy.proj.weight.abs().sum() == 0


def test_tracing_merges_trainer_and_actor_spans(three_steps):
    import json

    tmp_path = three_steps[3]
    trace = json.loads((tmp_path / "trace" / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    assert {"trainer-0", "env-0", "env-1", "policy-0"} <= names
    spans = [e for e in trace if e["ph"] == "X"]
    by_name = {}
    for e in spans:
        by_name.setdefault(e["name"], []).append(e)
    waits, updates = by_name["trainer.rollout"], by_name["trainer.update"]
    assert len(waits) == 3 and len(updates) == 3
    assert len(by_name["env.chunk_step"]) == 3 * 2 * 2  # steps x env actors x chunks
    # every env step and sample of step 1 lies inside the trainer's wait for that rollout,
    # and the update starts after the wait ends
    first = waits[0]
    inside = [e for e in by_name["env.chunk_step"] + by_name["policy.sample"]
              if first["ts"] <= e["ts"] and e["ts"] + e["dur"] <= first["ts"] + first["dur"]]
    assert len(inside) == 2 * 2 + 2 * 2
    assert updates[0]["ts"] >= first["ts"] + first["dur"]
    micro = by_name["trainer.micro_batch"]
    assert all(any(u["ts"] <= m["ts"] and m["ts"] + m["dur"] <= u["ts"] + u["dur"]
                   for u in updates) for m in micro)
