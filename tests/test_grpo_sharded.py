"""GRPO under strategies.HybridShardStrategy on 2 CPU processes (real gloo, FSDP2), each
rank driving its own rollout actor on one shared Ray cluster."""

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_rank_sharded_grpo(tmp_path, ray_local):
    """Both ranks start at once, as a cluster's launcher (torchrun, SLURM) starts them:
    Lightning's own re-launch of the script for rank 1 would wait for rank 0's imports first
    (that launcher: tests/test_grpo_multirank.py)."""
    address = ray_local.get_runtime_context().gcs_address
    env = dict(os.environ, WMRL_TEST_RAY_ADDRESS=address, OMP_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2",
               NODE_RANK="0")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "sharded_fit.py"),
                               str(tmp_path)], env=dict(env, LOCAL_RANK=str(r)), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    try:
        outs = [p.communicate(timeout=400)[0] for p in procs]
    finally:
        for p in procs:  # one rank failing leaves the other waiting in a collective
            if p.poll() is None:
                p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out[-3000:]}"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["world"] == 2 and r["steps"] == 3 and r["version"] == 3
        assert r["optimizer_steps"] == [2.0, 2.0, 2.0]  # 2 a batch, one global step each
        assert r["sharded"].startswith("FSDP")  # the policy really was fully_shard-ed
        # algorithm.kl_coef > 0: the frozen reference is sharded as well, and never trains
        # (the toy policy starts at zero); by step 3 the policy has moved away from it
        assert r["ref_sharded"].startswith("FSDP") and r["ref_bias_abs"] == 0.0
        assert r["ref_kl"] > 0
    assert [r["rank"] for r in ranks] == [0, 1]
    # the ranks rolled out different episodes but hold the same (all-reduced) weights
    assert ranks[0]["success"] != ranks[1]["success"]
    assert ranks[0]["bias_sum"] == ranks[1]["bias_sum"] != 0.0
