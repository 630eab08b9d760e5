"""Runs are reproducible: the same config twice gives the same weights, and a run stopped at
step 2 and resumed from its last.ckpt ends where a straight run ends (weights, AdamW state,
the lr schedule's place)."""

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
    # a cosine lr over the 4 steps: the resumed half must pick the schedule up at step 2
    # (Lightning restores the scheduler), else steps 3-4 take other learning rates; a KL
    # penalty to the base: the resumed half must rebuild the reference from the policy config
    # (the base weights, not the checkpoint's), else its steps 3-4 pull toward other weights
    over = {"trainer.max_steps": 4, "logger": None, "algorithm.lr_schedule": "cosine",
            "algorithm.lr_schedule_steps": 4, "algorithm.kl_coef": 0.5}
    fit(toy_cfg(tmp_path / "a", **over))
    fit(toy_cfg(tmp_path / "b", **over))
    straight = _state(tmp_path / "a" / "checkpoints" / "last.ckpt")
    _assert_same(straight, _state(tmp_path / "b" / "checkpoints" / "last.ckpt"))
    assert straight[0] == 4 and straight[1]["policy.bias"].abs().sum() > 0  # it trained
    assert not any(k.startswith("reference_policy.") for k in straight[1])  # not saved
    sched = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)[
        "lr_schedulers"][0]
    assert sched["last_epoch"] == 4 and sched["_last_lr"][0] == pytest.approx(0.0)

    fit(toy_cfg(tmp_path / "c", **{**over, "trainer.max_steps": 2}))
    fit(toy_cfg(tmp_path / "c", **over, ckpt_path=str(tmp_path / "c" / "checkpoints" /
                                                      "last.ckpt")))
    _assert_same(straight, _state(tmp_path / "c" / "checkpoints" / "last.ckpt"))


def test_default_fit_with_sim_eval_twice_is_bit_identical(tmp_path, ray_local):
    """The shipped assets (policy, world model with its resample check, reward) at a tiny batch,
    the simulator evaluating every step on train and unseen scenes: two runs give the same
    weights, the same evals and the same exploitation signal. A 3-step run without the sim
    eval passes through the same step-2 weights: the evals leave training alone, and a longer
    run's step-N checkpoint is the N-step run's policy (scripts/choose_run_length.py)."""
    import json

    from conftest import CONF_DIR
    from hydra import compose, initialize_config_dir

    tiny = ["logger=csv", "rollout.num_envs=8", "rollout.group_size=4",
            "algorithm.global_batch=64"]
    for name in ("a", "b"):
        with initialize_config_dir(CONF_DIR, version_base="1.3"):
            cfg = compose("fit", overrides=[
                f"run_dir={tmp_path / name}", *tiny, "trainer.max_steps=2",
                "callbacks.sim_eval.every_n_steps=1", "callbacks.sim_eval.episodes_per_task=6",
                "+callbacks.sim_eval.num_envs=6", "+callbacks.sim_eval.num_videos=0",
                "checkpoint.keep_last=0"])
        fit(cfg)
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        fit(compose("fit", overrides=[f"run_dir={tmp_path / 'long'}", *tiny,
                                      "trainer.max_steps=3", "callbacks.sim_eval=null",
                                      "checkpoint.keep_last=-1"]))
    a, b = (_state(tmp_path / n / "checkpoints" / "last.ckpt") for n in "ab")
    _assert_same(a, b)
    hist = [[json.loads(line) for line in open(tmp_path / n / "sim_eval" / "history.jsonl")]
            for n in "ab"]
    strip = [[{k: v for k, v in r.items() if k != "sim/eval_seconds"} for r in h] for h in hist]
    assert strip[0] == strip[1] and [r["step"] for r in hist[0]] == [0, 1, 2]
    assert "sim_unseen/success" in hist[0][0] and "sim_unseen/success" in hist[0][-1]
    from wmrl.run_logs import read_metric

    fragile = [read_metric(str(tmp_path / n), "wm/fragile_success").values for n in "ab"]
    assert len(fragile[0]) == 2 and (fragile[0] == fragile[1]).all()
    assert a[0] == 2 and len(a[2]) > 0  # two steps, and AdamW state: a real update happened
    long_dir = tmp_path / "long" / "checkpoints"
    _assert_same(a, _state(long_dir / "step-000002.ckpt"))
    assert _state(long_dir / "last.ckpt")[0] == 3
