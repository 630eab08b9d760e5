"""GRPO under strategies.HybridShardStrategy on 2 CPU processes (real gloo, FSDP2), each
rank driving its own rollout actors on one shared Ray cluster."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_two_rank_sharded_grpo(tmp_path, ray_local):
    address = ray_local.get_runtime_context().gcs_address
    env = dict(os.environ, WMRL_TEST_RAY_ADDRESS=address, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "sharded_fit.py"), str(tmp_path)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["world"] == 2 and r["steps"] == 3 and r["version"] == 3
        assert r["optimizer_steps"] == [2.0, 2.0, 2.0]  # 2 a batch, one global step each
        assert r["sharded"].startswith("FSDP")  # the policy really was fully_shard-ed
        # algorithm.kl_coef > 0: the frozen reference is sharded as well, and never trains
        # (the toy policy starts at zero); by step 3 the policy has moved away from it
        assert r["ref_sharded"].startswith("FSDP") and r["ref_bias_abs"] == 0.0
        assert r["ref_kl"] > 0
    # the ranks rolled out different episodes but hold the same (all-reduced) weights
    assert ranks[0]["success"] != ranks[1]["success"]
    assert ranks[0]["bias_sum"] == ranks[1]["bias_sum"] != 0.0
