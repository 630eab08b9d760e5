"""Runs are reproducible: a run stopped at step 2 and resumed from its last.ckpt ends where a
straight run of the same config ends (weights, AdamW state, the lr schedule's place), and the
tabletop fit passes through the same weights however often the simulator evaluates."""

import os
import warnings

import pytest
import torch
import yaml
from test_fit_toy import toy_cfg

from wmrl.fit import fit
from wmrl.module import GRPOModule

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
    """A 4-step run, and a 2-step run of the same config resumed to step 4: bit-identical
    weights and AdamW state (so two runs of one config agree, and a resume continues exactly).
    A cosine lr over the 4 steps: the resumed half must pick the schedule up at step 2
    (Lightning restores the scheduler), else steps 3-4 take other learning rates; a KL
    penalty to the base: the resumed half must rebuild the reference from the policy config
    (the base weights, not the checkpoint's), else its steps 3-4 pull toward other weights."""
    over = {"trainer.max_steps": 4, "logger": None, "algorithm.lr_schedule": "cosine",
            "algorithm.lr_schedule_steps": 4, "algorithm.kl_coef": 0.5}
    with warnings.catch_warnings(record=True) as caught:  # (the filters in force: recwarn's
        fit(toy_cfg(tmp_path / "a", **over))              # "always" would show them all)
    # the frozen reference (kl_coef > 0) is in eval mode on purpose: no warning about it
    eval_mode = [str(w.message) for w in caught if "in eval mode" in str(w.message)]
    assert not eval_mode, eval_mode
    straight = _state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    assert straight[0] == 4 and straight[1]["policy.bias"].abs().sum() > 0  # it trained
    assert not any(k.startswith("reference_policy.") for k in straight[1])  # not saved
    sched = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)[
        "lr_schedulers"][0]
    assert sched["last_epoch"] == 4 and sched["_last_lr"][0] == pytest.approx(0.0)
    # Lightning's own loader rebuilds the module from the checkpoint alone
    loaded = GRPOModule.load_from_checkpoint(tmp_path / "a" / "checkpoints" / "last.ckpt",
                                             weights_only=True)
    assert loaded.algorithm.kl_coef == 0.5 and loaded.policy_version == 4
    assert all(torch.equal(v, straight[1][k]) for k, v in loaded.state_dict().items())

    ckpts = tmp_path / "c" / "checkpoints"
    half, keep = ckpts / "last.ckpt", {"checkpoint.keep_last": 1}
    fit(toy_cfg(tmp_path / "c", **{**over, **keep, "trainer.max_steps": 2}))
    assert _state(half)[0] == 2 and sorted(os.listdir(ckpts)) == ["last.ckpt",
                                                                  "step-000002.ckpt"]
    trainer, module = fit(toy_cfg(tmp_path / "c", **over, **keep, ckpt_path=str(half)))
    # the version, the step and the rollout count continue from the checkpoint's 2
    assert trainer.global_step == 4 and module.policy_version == 4
    assert trainer.datamodule.rollout_step == 4
    _assert_same(straight, _state(half))
    # the restored checkpoint callback goes on rotating the first run's step files
    assert sorted(os.listdir(ckpts)) == ["last.ckpt", "step-000004.ckpt"]


def test_tabletop_fit_with_sim_eval_is_reproducible_and_evals_leave_training_alone(
        tmp_path, ray_local, monkeypatch):
    """The shipped assets (policy, world model with its resample check, reward) at a tiny batch
    and 2-chunk episodes, GRPO starting from a pool of 16 scenes (``experiment=train_pool``,
    rendered into a fresh cache) and leaving out the episodes the world model does not repeat,
    the simulator scoring the task's scenes and the unseen ones. A 2-step run evaluating after
    every step and a 3-step run evaluating every 2nd step pass through the same step-2 weights
    and AdamW state (the extra eval at step 1 leaves training alone, and a longer run's step-N
    checkpoint is the N-step run's policy: scripts/choose_run_length.py), score the same
    weights the same (steps 0 and 2) and see the same exploitation signal in their common
    steps. (The plain default fit: the placement bench's, tests/bench.)"""
    import json

    from conftest import CONF_DIR
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    tiny = ["experiment=train_pool", "task.train_pool.size=16", "algorithm.drop_unrepeatable=true",
            "logger=csv", "rollout.num_envs=8", "rollout.group_size=4", "task.max_episode_steps=16",
            "algorithm.global_batch=64", "algorithm.filter_groups=false",  # (few successes)
            "callbacks.sim_eval.episodes_per_task=6",
            "+callbacks.sim_eval.num_envs=6", "+callbacks.sim_eval.num_videos=1",
            "callbacks.sim_eval.side_by_side.scenes=2",
            "rollout.actor_start_timeout_s=300"]  # under pytest's 600 s: a hang says why
    for name, steps, every, keep in (("a", 2, 1, 0), ("long", 3, 2, -1)):
        with initialize_config_dir(CONF_DIR, version_base="1.3"):
            fit(compose("fit", overrides=[
                f"run_dir={tmp_path / name}", *tiny, f"trainer.max_steps={steps}",
                f"callbacks.sim_eval.every_n_steps={every}", f"checkpoint.keep_last={keep}"]))
    a = _state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    assert a[0] == 2 and len(a[2]) > 0  # two steps, and AdamW state: a real update happened
    long_dir = tmp_path / "long" / "checkpoints"
    _assert_same(a, _state(long_dir / "step-000002.ckpt"))
    assert _state(long_dir / "last.ckpt")[0] == 3

    ha, hl = ([json.loads(line) for line in open(tmp_path / n / "sim_eval" / "history.jsonl")]
              for n in ("a", "long"))
    assert [r["step"] for r in ha] == [0, 1, 2] and [r["step"] for r in hl] == [0, 2, 3]
    # wm/success averages the world model's success since the previous eval: not comparable
    same = [{k: v for k, v in r.items() if k not in ("sim/eval_seconds", "wm/success")}
            for r in (ha[0], hl[0])]
    assert same[0] == same[1] and "sim_unseen/success" in ha[0]  # train + unseen scenes
    sim = [{k: v for k, v in r.items() if k.startswith("sim/") and k != "sim/eval_seconds"}
           for r in (ha[2], hl[1])]
    assert sim[0] == sim[1] and "sim/success" in sim[0]
    assert sim[0]["sim/paired_scenes"] == 2  # the paired gap too: the same weights, the same
    assert "sim_unseen/success" in ha[-1] and "sim_unseen/success" in hl[-1]  # at the end
    from wmrl.measure.run_logs import read_metric

    for key in ("wm/fragile_success", "rollout/dropped_unrepeatable"):
        a_, long_ = (read_metric(str(tmp_path / n), key).values for n in ("a", "long"))
        assert len(a_) == 2 and len(long_) == 3 and (a_ == long_[:2]).all(), key
    # imagined | real at every eval: 2 scenes at steps 0, 1, 2 (not at the unseen scenes'),
    # a GIF for the one the eval kept a video of
    sbs = tmp_path / "a" / "sim_eval" / "side_by_side"
    rows = [json.loads(line) for line in open(sbs / "side_by_side.jsonl")]
    assert [(r["step"], r["scene"]) for r in rows] == [(s, i) for s in (0, 1, 2) for i in (0, 1)]
    assert len(list(sbs.glob("step000002_scene*_wm_*_sim_*.gif"))) == 1
    # the trained policy leaves wmrl in the shipped policy's layout (scripts/export.py)
    from wmrl.pipeline.export import export_policy
    from wmrl.policies.openvla_oft import OpenVLAOFTPolicy

    export_policy(str(tmp_path / "a" / "checkpoints" / "last.ckpt"), str(tmp_path / "export"))
    back = OpenVLAOFTPolicy.from_pretrained(str(tmp_path / "export"), unnorm_key="tabletop")
    assert all(torch.equal(v, a[1][f"policy.{k}"]) for k, v in back.state_dict().items())
    card = (tmp_path / "export" / "README.md").read_text()
    assert "| 0 | " in card and "| 2 | " in card  # the run's sim evals, with intervals
    pool = tmp_path / "cache" / "train_pool" / "red_of_two-front_close-64x64-seed3-n16"
    config = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert config["env"]["initial_states"] == str(pool)
    # the pool's two files beside the writer's marker (wmrl.io.atomic: what wrote the folder)
    assert len([p for p in os.listdir(pool) if not p.startswith(".")]) == 2
