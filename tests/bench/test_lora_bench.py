"""The LoRA bench (wmrl/bench/lora.py) at its tiny size: every figure, and byte counts checked
by hand (the sync carries exactly the adapters' float32 bytes)."""

import torch

from tests.bench.test_bench import TINY, check_figures
from wmrl.bench.lora import run
from wmrl.policies.openvla_oft import build_policy


def test_lora_bench_figures():
    figures = run(**TINY["lora"])
    check_figures("lora", figures)
    by = {f["name"]: f["value"] for f in figures}
    full = build_policy().state_dict()
    assert by["lora.sync_bytes.tiny_full"] == sum(v.numel() * 4 for v in full.values())
    lora = build_policy(lora={"rank": 4})
    adapters = [v for k, v in lora.state_dict().items() if ".lora_" in k]
    assert by["lora.sync_bytes.tiny_lora_r4"] == 4 * sum(v.numel() for v in adapters)
    assert by["lora.trained_params.tiny_lora_r4"] == sum(v.numel() for v in adapters)
    assert 0 < by["lora.sync_ratio.tiny_lora_r4_vs_full"] < 1
    assert {"lora.grpo_step_s.tiny_full", "lora.grpo_step_s.tiny_lora_r4",
            "lora.grpo_step_ratio.tiny_lora_r4_vs_full"} <= set(by)
    assert all(torch.isfinite(torch.tensor(v)) for v in by.values())
