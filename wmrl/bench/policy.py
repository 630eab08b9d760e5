"""Policy throughput: sampled 8x7 action chunks per second (tiny OpenVLA-OFT, batch 32, CPU),
and the differentiable log-prob pass (forward + backward) that the GRPO update runs. Fused ops
(``build_policy(fused_ops=...)``, ``strategies.fused``): per-call RMSNorm eager vs fused at the
tiny policy's shape and at Llama-7B width, and the policy forward's fused / eager time ratio,
measured side by side (interleaved rounds, medians). The GRPO micro-batch (``GRPOModule._micro_loss``
+ backward) with ``algorithm.kl_coef`` > 0 against 0, side by side: the cost of the frozen
reference's extra no-grad forward."""

from __future__ import annotations

import copy
import statistics
import time

import torch

from strategies.fused import apply_fused_ops

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


def run(repeats: int = 10, batch: int = BATCH, rounds: int | None = None) -> list[dict]:
    """``repeats`` timed sample calls (half as many updates); ``rounds`` of the side-by-side
    comparisons (default max(3, repeats // 2))."""
    from wmrl.policies.openvla_oft import build_policy

    rounds = max(3, repeats // 2) if rounds is None else rounds
    policy = build_policy()
    obs = _obs(batch)
    gen = torch.Generator().manual_seed(0)
    t_sample = _time(lambda: policy.sample(obs, 1.6, generator=gen), repeats)
    tokens = policy.sample(obs, 1.6, generator=gen).tokens

    def update():
        policy.zero_grad(set_to_none=True)
        policy.log_probs(obs, tokens, 1.6).sum().backward()

    t_update = _time(update, max(1, repeats // 2))
    ctx = {"config": "openvla_oft_tiny", "batch": batch, "threads": torch.get_num_threads(),
           "params": sum(p.numel() for p in policy.parameters())}
    return [
        {"name": "policy.sample_chunks_per_s", "value": batch / t_sample, "unit": "chunks/s",
         "seconds_per_batch": t_sample, **ctx},
        {"name": "policy.logprob_fwd_bwd_samples_per_s", "value": batch / t_update,
         "unit": "samples/s", "seconds_per_batch": t_update, **ctx},
        *fused_figures(policy, obs, rounds=rounds),
        kl_figure(policy, obs, tokens, rounds=rounds),
    ]


def _side_by_side(fns: dict, rounds: int, calls: int) -> dict[str, float]:
    """Median seconds per call of each fn, the fns interleaved within every round (machine
    load drifts over both alike)."""
    for fn in fns.values():
        fn()  # warm-up
    per: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per[k].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in per.items()}


def _rms_norm_figure(name: str, eager_norm, shape: tuple, rounds: int) -> dict:
    fused_norm = copy.deepcopy(eager_norm)
    kernel = apply_fused_ops(fused_norm, "cpu", ops=("rms_norm",)).kernels["rms_norm"]
    x = torch.randn(*shape)
    with torch.no_grad():
        t = _side_by_side({"eager": lambda: eager_norm(x), "fused": lambda: fused_norm(x)},
                          rounds, calls=20)
    return {"name": name, "value": t["fused"] * 1e6, "unit": "us", "eager_us": t["eager"] * 1e6,
            "speedup": t["eager"] / t["fused"], "shape": list(shape), "dtype": "float32",
            "kernel": kernel, "threads": torch.get_num_threads()}


def kl_figure(policy, obs: dict, tokens: torch.Tensor, rounds: int = 5) -> dict:
    """Seconds per GRPO micro-batch (loss + backward) with the KL penalty (``kl_coef`` 0.1: the
    reference policy's no-grad forward and the k3 term) and without, the same weights, tokens
    and advantages, interleaved."""
    from wmrl.module import GRPOModule

    b, per_chunk = tokens.shape
    samples = {"image": obs["image"], "task": obs["task"], "tokens": tokens,
               "old_logprobs": torch.full((b, per_chunk), -5.0),
               "advantages": torch.linspace(-1, 1, b), "weights": torch.full((b, per_chunk), 1.0 / b)}
    idx = torch.arange(b)
    rollout = dict(group_size=8, temperature=1.6)  # WoVR's
    modules = {"kl0": GRPOModule(policy=copy.deepcopy(policy), **rollout),
               "kl": GRPOModule(policy=copy.deepcopy(policy), **rollout,
                                algorithm={"kl_coef": 0.1})}

    def step(module):
        module.zero_grad(set_to_none=True)
        module._micro_loss(samples, idx, 1.0)[0].backward()

    t = _side_by_side({k: (lambda m=m: step(m)) for k, m in modules.items()}, rounds, calls=2)
    return {"name": "policy.kl_micro_batch_time_ratio", "value": t["kl"] / t["kl0"],
            "unit": "kl/no_kl", "kl0_s": t["kl0"], "kl_s": t["kl"], "kl_coef": 0.1,
            "batch": b, "config": "openvla_oft_tiny", "threads": torch.get_num_threads()}


def fused_figures(policy, obs: dict, rounds: int = 5) -> list[dict]:
    """RMSNorm per call (the eager module vs ``apply_fused_ops(..., "cpu")``: F.rms_norm) at the
    shape the policy's Llama norms see and at Llama-7B width (256 image patches instead of the
    tiny model's), and the policy forward time (``action_logits``, no grad) fused / eager. The
    rotary stays eager on CPU (no fused kernel there)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from wmrl.policies.openvla_oft import build_policy

    eager_norm = policy.language_model.model.norm
    shapes = []
    hook = eager_norm.register_forward_hook(lambda m, args, out: shapes.append(args[0].shape))
    with torch.no_grad():
        policy.action_logits(obs)
    hook.remove()
    b, seq, hidden = shapes[-1]  # the last call: the real forward (not the attention probe)
    seq_7b = seq - policy.num_patches + 256
    out = [_rms_norm_figure("policy.rms_norm_us_per_call", eager_norm, (b, seq, hidden),
                            rounds),
           _rms_norm_figure("policy.rms_norm_7b_width_us_per_call", LlamaRMSNorm(4096, eps=1e-6),
                            (1, seq_7b, 4096), rounds)]
    fused_policy = build_policy(fused_ops="cpu")
    with torch.no_grad():
        t = _side_by_side({"eager": lambda: policy.action_logits(obs),
                           "fused": lambda: fused_policy.action_logits(obs)}, rounds, calls=2)
    out.append({"name": "policy.fused_forward_time_ratio", "value": t["fused"] / t["eager"],
                "unit": "fused/eager", "eager_s": t["eager"], "fused_s": t["fused"],
                "batch": b, "config": "openvla_oft_tiny",
                "replaced": fused_policy.fused_ops_report.as_dict()["replaced"],
                "threads": torch.get_num_threads()})
    return out


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
