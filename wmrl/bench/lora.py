"""LoRA on the policy (``policy.lora``, wmrl/weights/lora.py): what a weight sync and a checkpoint
carry, and what a GRPO update costs, beside full-parameter training.

Bytes (exact, not timed): the tensors ``GRPOModule`` sends its rollout actors each step - the
whole policy without LoRA, the adapters alone with it - for the tiny policy (real tensors) and
for the published 7B (built on the meta device: the merged bf16 policy against RLinf's rank-32
adapters in float32). A LoRA checkpoint holds the same adapters.

Time (CPU, the tiny policy, batch ``batch``): one GRPO update step - log-probs with gradient,
the clipped loss, backward, AdamW - with every parameter trained against LoRA at each rank of
``ranks`` on RLinf's targets, the KL reference included (a frozen copy for full training, the
adapters switched off for LoRA). Variants run in turn (full, r8, r32, full, ...), medians after
``warmup`` rounds."""

from __future__ import annotations

import copy
import statistics
import time

import torch

from strategies.checkpoint import full_state_dict
from wmrl.algorithms import grpo
from wmrl.policies.configs import openvla_7b_config
from wmrl.policies.openvla_oft import build_policy, build_policy_meta
from wmrl.weights.lora import adapters_disabled, synced_entries


def _bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values())


def _synced(policy) -> dict:
    """What GRPOModule sends its actors (``wmrl.weights.lora.synced_entries``)."""
    return full_state_dict(policy, keep=synced_entries(policy))


def _step_fn(policy, obs, tokens, reference):
    """One GRPO update step (KL to the reference at beta 0.1), as GRPOModule runs it."""
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-5)
    old = policy.log_probs(obs, tokens, 1.0).detach()
    adv = torch.linspace(-1, 1, tokens.shape[0])

    def step():
        logp = policy.log_probs(obs, tokens, 1.0)
        with torch.no_grad():
            if reference is None:
                with adapters_disabled(policy):
                    ref = policy.log_probs(obs, tokens, 1.0)
            else:
                ref = reference.log_probs(obs, tokens, 1.0)
        loss, _ = grpo.policy_loss(logp, old, adv, torch.ones_like(logp, dtype=torch.bool),
                                   ref_logprobs=ref, kl_coef=0.1)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def run(batch: int = 8, steps: int = 5, warmup: int = 1, ranks: tuple[int, ...] = (8, 32),
        meta_7b: bool = True) -> list[dict]:
    figures: list[dict] = []
    g = torch.Generator().manual_seed(0)
    obs = {"image": torch.randint(0, 256, (batch, 64, 64, 3), dtype=torch.uint8, generator=g),
           "task": ["pick up the red block and put it on the plate"] * batch}
    base = build_policy()
    tokens = base.sample(obs, 1.0, generator=g).tokens
    variants = {"full": (base, copy.deepcopy(base).requires_grad_(False))}
    for r in ranks:
        variants[f"lora_r{r}"] = (build_policy(lora={"rank": r, "init": "gaussian"}), None)
    full_bytes = _bytes(_synced(base))
    for name, (policy, _) in variants.items():
        trained = sum(p.numel() for p in policy.parameters() if p.requires_grad)
        figures.append({"name": f"lora.trained_params.tiny_{name}", "value": float(trained),
                        "unit": "params"})
        if name != "full":
            sent = _bytes(_synced(policy))
            figures += [
                {"name": f"lora.sync_bytes.tiny_{name}", "value": float(sent), "unit": "B",
                 "context": "the adapters, float32 (also a checkpoint's policy part)"},
                {"name": f"lora.sync_ratio.tiny_{name}_vs_full", "value": sent / full_bytes,
                 "unit": "x"}]
    figures.append({"name": "lora.sync_bytes.tiny_full", "value": float(full_bytes),
                    "unit": "B", "context": "the whole policy, float32"})

    steps_fn = {n: _step_fn(p, obs, tokens, ref) for n, (p, ref) in variants.items()}
    times: dict[str, list[float]] = {n: [] for n in variants}
    for i in range(warmup + steps):
        for n, fn in steps_fn.items():
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                times[n].append(time.perf_counter() - t0)
    full_s = statistics.median(times["full"])
    for n, ts in times.items():
        s = statistics.median(ts)
        figures.append({"name": f"lora.grpo_step_s.tiny_{n}", "value": s, "unit": "s",
                        "context": f"batch {batch}, forward + KL reference + backward + AdamW, "
                                   f"CPU, {torch.get_num_threads()} threads, median of {steps}"})
        if n != "full":
            figures.append({"name": f"lora.grpo_step_ratio.tiny_{n}_vs_full",
                            "value": s / full_s, "unit": "x"})

    if meta_7b:  # the published 7B on meta: exact byte counts, nothing allocated
        merged = build_policy_meta(config=openvla_7b_config(), dtype="bfloat16")
        adapters = build_policy_meta(config=openvla_7b_config(), dtype="bfloat16",
                                     lora={"rank": 32, "alpha": 32})
        a = _synced(adapters)
        figures += [
            {"name": "lora.trained_params.7b_lora_r32",
             "value": float(sum(v.numel() for v in a.values())), "unit": "params"},
            {"name": "lora.sync_bytes.7b_merged_bf16", "value": float(_bytes(merged.state_dict())),
             "unit": "B", "context": "every sync without LoRA (rollout.policy_dtype=bfloat16)"},
            {"name": "lora.sync_bytes.7b_lora_r32", "value": float(_bytes(a)), "unit": "B",
             "context": "RLinf's targets, float32 adapters"},
            {"name": "lora.sync_ratio.7b_lora_r32_vs_merged",
             "value": _bytes(a) / _bytes(merged.state_dict()), "unit": "x"}]
    return figures
