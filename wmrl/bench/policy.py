"""Policy throughput: sampled 8x7 action chunks per second (tiny OpenVLA-OFT, batch 32, CPU),
and the differentiable log-prob pass (forward + backward) that the GRPO update runs."""

from __future__ import annotations

import time

import torch

BATCH = 32
IMAGE = 64  # obs frames larger than the model's input: the in-model resize is part of the cost


def _obs(b: int) -> dict:
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (b, IMAGE, IMAGE, 3), generator=g, dtype=torch.uint8)
    tasks = ["pick up the black bowl and place it on the plate", "open the top drawer"]
    return {"image": img, "task": [tasks[i % 2] for i in range(b)]}


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (attention probe, prompt cache)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def run(repeats: int = 10) -> list[dict]:
    from wmrl.policies.openvla_oft import build_policy

    policy = build_policy()
    obs = _obs(BATCH)
    gen = torch.Generator().manual_seed(0)
    t_sample = _time(lambda: policy.sample(obs, 1.6, generator=gen), repeats)
    tokens = policy.sample(obs, 1.6, generator=gen).tokens

    def update():
        policy.zero_grad(set_to_none=True)
        policy.log_probs(obs, tokens, 1.6).sum().backward()

    t_update = _time(update, max(1, repeats // 2))
    ctx = {"config": "openvla_oft_tiny", "batch": BATCH, "threads": torch.get_num_threads(),
           "params": sum(p.numel() for p in policy.parameters())}
    return [
        {"name": "policy.sample_chunks_per_s", "value": BATCH / t_sample, "unit": "chunks/s",
         "seconds_per_batch": t_sample, **ctx},
        {"name": "policy.logprob_fwd_bwd_samples_per_s", "value": BATCH / t_update,
         "unit": "samples/s", "seconds_per_batch": t_update, **ctx},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
