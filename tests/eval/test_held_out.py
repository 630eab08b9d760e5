"""wmrl.eval.held_out / scripts/score_held_out.py: a run's last checkpoint and the base
policy scored on the held-out scenes, written next to the run, read by seed_report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wmrl.config import ConfigError
from wmrl.eval.held_out import held_out_config, read_held_out, score_runs
from wmrl.eval.policy_checkpoint import load_policy

ROOT = Path(__file__).resolve().parents[2]


def test_refuses_the_reported_and_trained_scene_sets():
    for seed in (0, 1):  # task.eval_seed, task.unseen_eval_seed
        with pytest.raises(ConfigError, match="score the runs on another one"):
            held_out_config(seed, purpose="score the runs")
    cfg = held_out_config(2, states=8, overrides=["num_envs=8"])
    assert cfg["env"]["eval_seed"] == 2 and cfg["episodes_per_task"] == 8


def test_scores_the_last_checkpoint_against_the_base_policy(tmp_path):
    """The shipped SFT weights score as the base policy does (gain 0); with a zeroed lm_head
    (uniform random actions) the run scores lower. A scored run is read back, not rescored."""
    policy_cfg = {"_target_": "wmrl.policies.openvla_oft.build_policy",
                  "pretrained_path": str(ROOT / "wmrl/assets/policy"), "unnorm_key": "tabletop"}
    sft = load_policy(policy_cfg).state_dict()
    zero = dict(sft, **{"language_model.lm_head.weight":
                        torch.zeros_like(sft["language_model.lm_head.weight"])})
    runs = []
    for name, w in {"sft": sft, "zero": zero}.items():
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        torch.save({"state_dict": {f"policy.{k}": v for k, v in w.items()}, "global_step": 30},
                   tmp_path / name / "checkpoints" / "last.ckpt")
        runs.append(str(tmp_path / name))
    cfg = held_out_config(2, states=8, overrides=["num_envs=8", "threads=1"])
    threads = torch.get_num_threads()
    try:
        out = score_runs(runs, cfg)
    finally:
        torch.set_num_threads(threads)
    s, z = out[runs[0]], out[runs[1]]
    assert s["success"] == s["base_success"] == z["base_success"] > z["success"] == 0.0
    assert s["eval_seed"] == 2 and s["states"] == 8
    assert read_held_out(runs[1]) == z  # written next to the run
    # already scored on these scenes: read back, not rescored
    (tmp_path / "zero" / "held_out.json").write_text(json.dumps(dict(z, success=0.5)))
    assert score_runs(runs[1:], cfg)[runs[1]]["success"] == 0.5
    with pytest.raises(ConfigError, match="no checkpoints/last.ckpt"):
        score_runs([str(tmp_path / "missing")], cfg)


def test_the_command_refuses_in_one_line_with_exit_code_2(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/score_held_out.py"),
                           str(tmp_path), "--eval-seed", "1"], capture_output=True, text=True,
                          timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert err.startswith("config error: --eval-seed 1 is the unseen") and "\n" not in err
