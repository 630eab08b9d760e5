"""GRPO under strategies.HybridShardStrategy on 2 CPU processes (real gloo, FSDP2), each
rank driving its own rollout actor on one shared Ray cluster."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.two_ranks import launch_two_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = Path(HERE).parent


def launch(out_dir, ray_local, *args) -> list[dict]:
    """``sharded_fit.py`` on 2 ranks started at once (tests/two_ranks.py; Lightning's own
    re-launch: tests/test_grpo_multirank.py), one Ray cluster. Each rank's summary."""
    address = ray_local.get_runtime_context().gcs_address
    launch_two_ranks([sys.executable, os.path.join(HERE, "sharded_fit.py"), out_dir, *args],
                     cwd=out_dir, env={"WMRL_TEST_RAY_ADDRESS": address})
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_two_rank_sharded_grpo_resumes_and_evaluates_its_folders(tmp_path, ray_local):
    ranks = launch(tmp_path, ray_local)
    for r in ranks:
        assert r["world"] == 2 and r["steps"] == 3 and r["version"] == 3
        assert r["optimizer_steps"] == [2.0, 2.0, 2.0]  # 2 a batch, one global step each
        assert r["sharded"].startswith("FSDP")  # the policy really was fully_shard-ed
        # algorithm.kl_coef > 0: the frozen reference is sharded as well, and never trains
        # (the toy policy starts at zero); by step 3 the policy has moved away from it
        assert r["ref_sharded"].startswith("FSDP") and r["ref_bias_abs"] == 0.0
        assert r["ref_kl"] > 0
    assert [r["rank"] for r in ranks] == [0, 1]
    # every rank logs the union's success (tests/test_grpo_multirank.py: exactly) and holds
    # the same (all-reduced) weights
    assert ranks[0]["success"] == ranks[1]["success"]
    assert ranks[0]["bias_sum"] == ranks[1]["bias_sum"] != 0.0

    # every checkpoint is a sharded folder; the run's own readers take it
    ckpts = tmp_path / "checkpoints"
    assert (ckpts / "last.ckpt" / ".metadata").is_file()
    assert (ckpts / "step-000002.ckpt" / ".metadata").is_file()
    from wmrl.config import CONFIG_KEY, read_checkpoint_meta, resolve_ckpt_path

    meta = read_checkpoint_meta(str(ckpts / "last.ckpt"))
    assert meta["global_step"] == 3 and meta[CONFIG_KEY]["strategy"]["shard_size"] == "world"
    from wmrl.eval.policy_checkpoint import policy_state_from_ckpt  # eval's reader

    policy = policy_state_from_ckpt(str(ckpts / "last.ckpt"))  # full tensors, one process
    assert float(policy["bias"].sum()) == pytest.approx(ranks[0]["bias_sum"], abs=0)
    from wmrl.pipeline.export import read_checkpoint  # scripts/export.py's reader

    whole = read_checkpoint(str(ckpts / "last.ckpt"))
    assert whole["global_step"] == 3 and torch.equal(whole["state_dict"]["policy.bias"],
                                                     policy["bias"])
    cfg = OmegaConf.create({"ckpt_path": "last", "run_dir": str(tmp_path)})
    assert resolve_ckpt_path(cfg).ckpt_path == str(ckpts / "last.ckpt")

    # resumed from the step-2 folder on 2 ranks: step 3 ends where the straight run's did
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    again = launch(resumed, ray_local, ckpts / "step-000002.ckpt")
    assert [r["steps"] for r in again] == [3, 3] and again[0]["version"] == 3
    assert again[0]["bias_sum"] == again[1]["bias_sum"] == ranks[0]["bias_sum"]
    assert again[0]["success"][-1] == ranks[0]["success"][-1]  # step 3's rollout, too
