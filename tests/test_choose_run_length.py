"""wmrl.eval.run_length (scripts/choose_run_length.py): step checkpoints scored on held-out scenes, the best step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from wmrl.config import ConfigError
from wmrl.eval import run_length
from wmrl.eval.policy_checkpoint import load_policy

ROOT = Path(__file__).resolve().parents[1]
STATS = {"action": {"q01": [-0.5] * 6 + [0.0], "q99": [0.5] * 6 + [1.0],
                    "mask": [True] * 6 + [False]}}




def test_choose_hand_numbers():
    out = run_length.choose({0: [0.40, 0.40, 0.40], 5: [0.45, 0.47, 0.49], 10: [0.50, 0.44, 0.41],
                      15: [0.47, 0.47, 0.47]})
    assert out["best_step"] == 5  # mean 0.47; step 15 ties it and is longer
    row = out["by_step"][10]
    assert row["mean"] == pytest.approx(0.45)
    # sample std of (.50, .44, .41) = sqrt((.05^2 + .01^2 + .04^2) / 2) = sqrt(.0021)
    assert row["se"] == pytest.approx(math.sqrt(0.0021) / math.sqrt(3))
    assert out["by_step"][15]["se"] == pytest.approx(0.0)


def test_step_checkpoints_and_common_steps(tmp_path):
    for run, steps in {"a": [5, 10, 15], "b": [5, 10]}.items():
        d = tmp_path / run / "checkpoints"
        d.mkdir(parents=True)
        for s in steps:
            (d / f"step-{s:06d}.ckpt").write_bytes(b"")
        (d / "last.ckpt").write_bytes(b"")
    found = {r: run_length.step_checkpoints(str(tmp_path / r)) for r in "ab"}
    assert sorted(found["a"]) == [5, 10, 15]
    assert found["b"][10].endswith("b/checkpoints/step-000010.ckpt")
    assert run_length.common_steps(found) == [5, 10]  # run b stopped at 10
    (tmp_path / "c" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="keep_last=-1"):
        run_length.step_checkpoints(str(tmp_path / "c"))
    with pytest.raises(ConfigError, match="no checkpoints/ dir"):
        run_length.step_checkpoints(str(tmp_path / "missing"))


def test_refuses_the_reported_scene_sets(tmp_path):
    for seed in (0, 1):  # task.eval_seed, task.unseen_eval_seed
        with pytest.raises(ConfigError, match="choose the run length on another one"):
            run_length.score([str(tmp_path)], eval_seed=seed)
    with pytest.raises(ConfigError, match=r"--eval-seed 3 is the training pool's"):
        run_length.score([str(tmp_path)], eval_seed=3, overrides=["task.train_pool={seed:3,size:8}"])


def test_scores_every_step_checkpoint_in_the_simulator(tmp_path):
    """Each (run, step) cell is the simulator success of that run's checkpoint on eval_seed 2:
    the shipped SFT weights score as the base policy (step 0) does; with a zeroed lm_head (every
    action token equally likely: uniform random actions) the policy scores lower."""
    policy_cfg = {"_target_": "wmrl.policies.openvla_oft.build_policy",
                  "pretrained_path": str(ROOT / "wmrl/assets/policy"), "unnorm_key": "tabletop"}
    sft = load_policy(policy_cfg).state_dict()
    zero = dict(sft, **{"language_model.lm_head.weight":
                        torch.zeros_like(sft["language_model.lm_head.weight"])})
    cells = {"run0": {2: sft, 4: zero}, "run1": {2: zero, 4: sft}}
    for run, steps in cells.items():
        d = tmp_path / run / "checkpoints"
        d.mkdir(parents=True)
        for step, w in steps.items():
            torch.save({"state_dict": {f"policy.{k}": v for k, v in w.items()},
                        "global_step": step}, d / f"step-{step:06d}.ckpt")
    runs = [str(tmp_path / r) for r in cells]
    # 8 scenes in one batch, one torch thread (eval.run sets it; a second thread on a shared
    # 2-core machine only waits for the first), put back after
    threads = torch.get_num_threads()
    try:
        out = run_length.score(runs, eval_seed=2, states=8, overrides=["num_envs=8", "threads=1"])
    finally:
        torch.set_num_threads(threads)
    base = out["by_step"][0]["values"][0]
    zeroed = out["by_step"][2]["values"][1]
    assert out["by_step"][0]["values"] == [base, base]
    assert out["by_step"][2]["values"] == [base, zeroed]
    assert out["by_step"][4]["values"] == [zeroed, base]
    assert base > zeroed  # ~50% for the SFT policy, 0 for uniform random actions
    assert out["best_step"] == 0  # every step ties the base mean at best: the shortest wins
    assert out["eval_seed"] == 2 and out["states"] == 8
