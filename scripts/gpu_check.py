"""The prepared acceptance run on an accelerator machine (``make gpu-check``), < 8 minutes on
one CUDA card:

1. the device tests (``pytest -m gpu``, with Ray counting the real cards);
2. world-model frames/s of the tiny Wan at 256x256 on the card;
3. a 3-step fit per placement with a mid-size OpenVLA-OFT policy (~160M parameters: Llama
   1024 wide, 12 layers; bf16, gradient checkpointing), the tiny Wan and a ResNet reward on
   the card: collocated (weights over CUDA IPC), disaggregated (object store) and hybrid
   (gloo group), env and policy actors taking half a card each.

Prints one JSON line per figure: step time, peak device memory per role, weight-sync GB/s.
Without an accelerator it prints "no accelerator: skipped" and exits 0. ``--cpu`` runs the
same fits on the CPU at the tiny size (checks this script; figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import lightning as L
import torch
from omegaconf import OmegaConf

from strategies import devices
from wmrl.build import build, to_container
from wmrl.config import compose_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PLACEMENTS = {  # placement -> overrides (on one card: env and policy actors take half each)
    "collocated": ["rollout.placement=collocated", "rollout.weight_sync.transport=device"],
    "disaggregated": ["rollout.placement=disaggregated", "rollout.env_resources={GPU: 0.5}",
                      "rollout.policy_resources={GPU: 0.5}", "rollout.weight_sync.transport=cpu"],
    "hybrid": ["rollout.placement=hybrid", "rollout.pipeline_stages=2",
               "rollout.env_resources={GPU: 0.5}", "rollout.policy_resources={GPU: 0.5}",
               "rollout.weight_sync.transport=gloo"],
}


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def mid_policy_config() -> dict:
    """The tiny OpenVLA-OFT's vision tower with a ~150M-parameter Llama."""
    from wmrl.policies.configs import tiny_config

    cfg = tiny_config()
    cfg["text_config"].update(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                              num_attention_heads=16, num_key_value_heads=16)
    return cfg


def compose_fit(overrides: list[str], run_dir: str, cpu: bool):
    base = [f"run_dir={run_dir}", "policy=openvla_oft_tiny", "env=wan_tiny",
            "reward=resnet", "logger=csv", "callbacks.sim_eval=null", "trainer.max_steps=3",
            "trainer.enable_progress_bar=false", "checkpoint.every_n_steps=1000",
            "rollout.num_envs=16", "rollout.group_size=4", "rollout.max_episode_steps=16",
            "rollout.worker_threads=null", "rollout.worker_cpus=0.5",
            "algorithm.filter_groups=false",  # a random reward: train on every group anyway
            "algorithm.global_batch=32", "algorithm.micro_batch=8"]
    if not cpu:
        base += ["trainer.accelerator=gpu", "policy.dtype=bfloat16",
                 "policy.gradient_checkpointing=true"]
    cfg = compose_config("fit", base + overrides)
    if not cpu:
        OmegaConf.update(cfg, "policy.config", mid_policy_config(), force_add=True)
    return cfg


class Measure(L.Callback):
    """Before the DataModule's actors go: their device memory and placement."""

    def on_train_end(self, trainer, pl_module):
        import ray

        dm = trainer.datamodule
        self.actors = [dict(info, memory=mem) for info, mem in zip(
            dm.placement_report(), ray.get([a.memory_stats.remote() for a in dm.layout.actors]))]
        self.transport = dm.sender.transport


def fit_placement(name: str, overrides: list[str], cpu: bool) -> list[dict]:
    from wmrl.fit import fit

    run_dir = tempfile.mkdtemp(prefix=f"gpu-check-{name}-")
    cfg = compose_fit(overrides if not cpu else
                      [o for o in overrides if "GPU" not in o and "transport=device" not in o],
                      run_dir, cpu)
    if not cpu:
        torch.cuda.reset_peak_memory_stats()
    measure = Measure()
    t0 = time.perf_counter()
    trainer, module = fit(cfg, extra_callbacks=[measure])
    wall = time.perf_counter() - t0
    steps = [m["time/rollout_s"] + m["time/train_s"] for m in module.history]
    sync_s = module.history[-1]["time/weight_sync_s"]  # the last step's push
    nbytes = sum(p.numel() * p.element_size() for p in module.policy.parameters())
    trainer_peak = None if cpu else int(torch.cuda.max_memory_allocated())
    rows = [
        {"name": f"gpu_check.fit.{name}.step_s", "value": round(statistics.median(steps[1:]), 3),
         "unit": "s", "steps_s": [round(s, 3) for s in steps], "wall_s": round(wall, 1),
         "rollout_s": [round(m["time/rollout_s"], 3) for m in module.history],
         "offload_s": [round(m.get("offload/seconds", 0.0), 3) for m in module.history]},
        {"name": f"gpu_check.fit.{name}.weight_sync_gbps",
         "value": round(nbytes / 1e9 / max(sync_s, 1e-9), 3), "unit": "GB/s",
         "transport": measure.transport, "bytes": nbytes, "seconds": round(sync_s, 4)},
        {"name": f"gpu_check.fit.{name}.peak_memory", "unit": "GB",
         "trainer": None if trainer_peak is None else round(trainer_peak / 1e9, 3),
         "actors": {a["name"]: {"device": a["device"],
                                "peak_gb": round(a["memory"].get("peak_bytes", 0) / 1e9, 3)}
                    for a in measure.actors}},
    ]
    return rows


def world_model_fps(cpu: bool, size: int = 256, num_envs: int = 8, chunks: int = 4) -> dict:
    cfg = compose_config("fit", ["run_dir=/tmp/gpu-check", "env=wan_tiny", "reward=resnet"])
    env = dict(to_container(cfg.env), reward=dict(to_container(cfg.reward)))
    device = "cpu" if cpu else "cuda"
    env["world_model"].update(height=size, width=size)
    env.update(num_envs=num_envs, group_size=num_envs, max_episode_steps=8 * (chunks + 1),
               device=device, success_threshold=2.0)  # no episode ends: every chunk generates
    env["reward"]["device"] = device
    wm = build(env)
    wm.reset(seed=0)
    actions = torch.zeros(num_envs, 8, 7)
    wm.chunk_step(actions)  # warm-up (kernels, allocator)
    if not cpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(chunks):
        wm.chunk_step(actions)
    if not cpu:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"name": "gpu_check.world_model_fps", "value": round(num_envs * 8 * chunks / seconds, 1),
            "unit": "frames/s", "size": size, "num_envs": num_envs, "device": device,
            "what": "tiny Wan + ResNet reward, 5 denoising steps, 8 new frames per chunk"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (checks the script)")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--placements", nargs="*", default=list(PLACEMENTS))
    args = ap.parse_args()
    kind = devices.detect_device_type()
    if kind == "cpu" and not args.cpu:
        print("no accelerator: skipped")
        return 0
    if kind not in ("cuda", "cpu"):
        print(f"{kind}: this check is prepared for CUDA/ROCm cards; skipped")
        return 0
    emit({"name": "gpu_check.device", **devices.describe("cpu" if args.cpu else kind),
          "card": None if args.cpu else torch.cuda.get_device_name(0)})
    failed = False
    if not args.skip_tests:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                               os.path.join(ROOT, "tests", "test_gpu.py")], cwd=ROOT,
                              env=dict(os.environ, WMRL_REAL_DEVICES="1"),
                              capture_output=True, text=True, timeout=300)
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        emit({"name": "gpu_check.tests", "rc": proc.returncode, "summary": lines[-1:],
              "seconds": round(time.perf_counter() - t0, 1)})
        if proc.returncode not in (0, 5):
            print("\n".join(lines[-60:]), file=sys.stderr)
            failed = True
    emit(world_model_fps(args.cpu))
    for name in args.placements:
        try:
            for row in fit_placement(name, PLACEMENTS[name], args.cpu):
                emit(row)
        except Exception as err:  # noqa: BLE001 - report every placement, then fail
            emit({"name": f"gpu_check.fit.{name}", "error": repr(err)[:2000]})
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
