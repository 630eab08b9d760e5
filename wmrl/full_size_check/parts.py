"""The full-size check's parts, each run alone in its own process (its own peak memory):
``python -m wmrl.full_size_check.parts <part> <spec.json>`` prints the part's result as its
last stdout line (JSON). The spec names the part's config (a resolved yaml) and its paths.

``release`` writes RLinf's release layout with random weights; ``import`` imports it through
``wmrl.pipeline.rlinf.release`` (what ``scripts/import_rlinf.py`` calls); ``policy_checkpoint``
writes random weights at the published 7B's shapes; ``world_model`` resets an env actor's envs
and steps one chunk; ``rollout`` samples one chunk from a policy actor; ``grpo_lora`` /
``grpo_full`` run one GRPO update through ``GRPOModule`` and the one trainer set-up
(``wmrl.launch.trainer``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from wmrl.build import to_container
from wmrl.envs.initial_states import load_initial_states
from wmrl.fit import build_datamodule, build_module
from wmrl.full_size_check.cpu_linear import bf16_linears_in_float32
from wmrl.interfaces import TrajectoryBatch
from wmrl.launch.trainer import build_trainer
from wmrl.measure.peak_memory import PeakMemory
from wmrl.pipeline.rlinf.release import import_release
from wmrl.pipeline.rlinf.synthetic import write_release
from wmrl.plan.meta import build_policy
from wmrl.policies.openvla_oft import write_random_policy
from wmrl.rollout.given import GivenRollouts
from wmrl.rollout.workers import RolloutActor

GB = 1e9


def float32_gemms_on_cpu(spec: dict, *modules) -> dict:
    """On a CPU, the bf16 linear layers of ``modules`` through float32 GEMMs: torch's bf16
    GEMM there is its reference loop without AVX-512 BF16 or AMX (``cpu_linear``). Returns the
    result row's note: how many layers were switched."""
    if spec["device"] != "cpu":
        return {}
    n = bf16_linears_in_float32(*(m for m in modules if isinstance(m, torch.nn.Module)))
    return {"float32_gemm_linears": n}


def release(spec: dict, cfg) -> dict:
    wm = to_container(cfg.env.world_model)
    t0 = time.perf_counter()
    info = write_release(spec["out"], wm["transformer"], wm["vae"], int(wm["height"]),
                         int(wm["width"]), states=max(2, int(spec["envs"])))
    return {**info, "seconds": round(time.perf_counter() - t0, 1)}


def import_rlinf(spec: dict, cfg) -> dict:
    """The release's files through ``import_release``, what ``scripts/import_rlinf.py``
    calls, in this process (its peak is this process's)."""
    peak = PeakMemory("cpu")
    tr = cfg.env.world_model.transformer
    t0 = time.perf_counter()
    import_release(spec["dit"], spec["out"], vae=spec["vae"], dataset=spec["dataset"],
                   kir=bool(cfg.env.get("kir_reset", False)),
                   num_heads=int(tr.num_attention_heads), text_dim=int(tr.text_dim))
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_gb": round(peak.peak() / GB, 3)}


def policy_checkpoint(spec: dict, cfg) -> dict:
    p = cfg.policy  # its architecture as make plan builds it (absent checkpoint: the 7B's)
    arch = build_policy({**to_container(p), "lora": None})[0].config
    t0 = time.perf_counter()
    nbytes = write_random_policy(spec["out"], arch, "bfloat16", str(p.unnorm_key))
    return {"seconds": round(time.perf_counter() - t0, 1), "params": nbytes // 2}


def first_states(cfg, n: int) -> tuple:
    """n observations from the configured initial states: uint8 [n, H, W, 3], tasks."""
    wm = cfg.env.world_model
    states = load_initial_states(cfg.env.initial_states).resized(int(wm.height), int(wm.width))
    idx = [i % len(states) for i in range(n)]
    return states.frames[idx].numpy(), [states.tasks[i] for i in idx]


def world_model(spec: dict, cfg) -> dict:
    peak = PeakMemory(spec["device"])
    env = dict(build_datamodule(cfg).pool.env_cfg)
    env["group_size"] = env["num_envs"]  # one group of them all (+check.envs may be 1)
    t0 = time.perf_counter()
    actor = RolloutActor(env=env, shared_device=spec["device"], name="env-check")
    gemms = float32_gemms_on_cpu(spec, *(m for e in actor.envs
                                         for m in (e.model, e.reward_model)))
    t1 = time.perf_counter()
    peak.reset()
    actor.reset(0, seed=0)
    t2 = time.perf_counter()
    n, chunk = int(env["num_envs"]), int(env["chunk"])
    actions = np.random.default_rng(0).uniform(-1, 1, (n, chunk, 7)).astype(np.float32)
    actions[..., -1] = np.sign(actions[..., -1])
    _, record = actor.chunk_step(0, actions)
    t3 = time.perf_counter()
    return {"seconds": {"load_s": round(t1 - t0, 1), "reset_s": round(t2 - t1, 1),
                        "chunk_step_s": round(t3 - t2, 1)},
            "peak_bytes": peak.peak(),  # no prompt: the env role's plan does not read one
            "extra": {"envs": n, "rewards_finite": bool(np.isfinite(record["rewards"]).all()),
                      **gemms}}


def rollout(spec: dict, cfg) -> dict:
    peak = PeakMemory(spec["device"])
    policy = dict(build_datamodule(cfg).pool.policy_cfg)
    n = int(cfg.rollout.num_envs)
    image, tasks = first_states(cfg, n)
    t0 = time.perf_counter()
    actor = RolloutActor(policy=policy, shared_device=spec["device"], name="policy-check")
    gemms = float32_gemms_on_cpu(spec, actor.policy)
    t1 = time.perf_counter()
    peak.reset()
    actions, record = actor.sample(0, {"image": image, "task": tasks},
                                   float(cfg.rollout.temperature), seed=0)
    t2 = time.perf_counter()
    return {"seconds": {"load_s": round(t1 - t0, 1), "sample_s": round(t2 - t1, 1)},
            "peak_bytes": peak.peak(),
            "prompt_tokens": len(actor.policy.prompt.encode_one(tasks[0])),
            "extra": {"envs": n, "actions": list(actions.shape), **gemms}}


def grpo(spec: dict, cfg) -> dict:
    """One GRPO update on made-up groups of 2 (one success, one failure each) through the
    trainer set-up every entry point uses (``wmrl.launch.trainer``), with no logger and no
    checkpoint: nothing but the update is measured."""
    peak = PeakMemory(spec["device"])
    n = int(cfg.rollout.num_envs)
    image, tasks = first_states(cfg, n)
    per_chunk = int(cfg.rollout.chunk) * 7
    g = torch.Generator().manual_seed(0)
    rewards, dones = torch.zeros(n, int(cfg.rollout.chunk)), torch.zeros(
        n, int(cfg.rollout.chunk), dtype=torch.bool)
    rewards[0::2, -1], dones[:, -1] = 1.0, True
    batch = TrajectoryBatch(
        image=torch.from_numpy(image)[:, None], task=tasks,
        tokens=torch.randint(0, 256, (n, 1, per_chunk), generator=g),
        logprobs=torch.full((n, 1, per_chunk), -math.log(256.0)), rewards=rewards,
        dones=dones, success=rewards.sum(1) > 0, version=0)
    t0 = time.perf_counter()
    module = build_module(cfg)
    gemms = float32_gemms_on_cpu(spec, module)
    t1 = time.perf_counter()
    dev = torch.device(spec["device"])
    trainer = build_trainer({  # the one trainer set-up, one device, nothing written or logged
        "run_dir": spec["workdir"], "strategy": {"strategy": "auto"}, "logger": False,
        "trainer": {"accelerator": dev.type, "devices": [dev.index or 0]
                    if dev.type != "cpu" else 1, "precision": cfg.trainer.precision,
                    "max_steps": 1, "enable_checkpointing": False,
                    "enable_progress_bar": False, "enable_model_summary": False}},
        step_checkpoint=False)
    peak.reset()
    trainer.fit(module, datamodule=GivenRollouts([batch]))
    t2 = time.perf_counter()
    m = module.last_metrics
    if not all(math.isfinite(m[k]) for k in ("train/loss", "train/grad_norm")):
        raise RuntimeError(f"the GRPO update gave a non-finite loss or gradient norm: {m}")
    trained = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    return {"seconds": {"build_s": round(t1 - t0, 1), "update_s": round(t2 - t1, 1)},
            "peak_bytes": peak.peak(),
            "prompt_tokens": len(module.policy.prompt.encode_one(tasks[0])),
            "extra": {"trained_params": trained, "micro_batches": 2,
                      "optimizer_steps": m["train/optimizer_steps"], **gemms}}


PARTS = {"release": release, "import": import_rlinf, "policy_checkpoint": policy_checkpoint,
         "world_model": world_model, "rollout": rollout, "grpo_lora": grpo, "grpo_full": grpo}


def run_part(part: str, spec_path: str) -> dict:
    spec = json.loads(Path(spec_path).read_text())
    return PARTS[part](spec, OmegaConf.load(spec["config"]))


if __name__ == "__main__":
    print(json.dumps(run_part(sys.argv[1], sys.argv[2])), flush=True)
