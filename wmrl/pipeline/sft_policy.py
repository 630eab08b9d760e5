"""The SFT policy run (``scripts/sft_policy.py`` is its argument parsing): the tiny OpenVLA-OFT
behaviour-cloned on tabletop demos (targets and statistics: ``sft.py``), saved in the
OpenVLA-OFT layout with ``sft_metrics.json``, checked in the simulator."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch

from wmrl.eval.evaluate import evaluate_policy, mixed_group_fraction
from wmrl.io.atomic import check_output_dir, write_text
from wmrl.pipeline import sft
from wmrl.policies.configs import tiny_config
from wmrl.policies.openvla_oft import build_policy
from wmrl.sim.dataset import TrajectoryDataset


def select_episodes(ds: TrajectoryDataset, per_task: int | None) -> list:
    """All episodes, or the first ``per_task`` of each task (in dataset order)."""
    counts: dict[str, int] = {}
    out = []
    for ep in ds:
        if per_task is not None and counts.get(ep.task, 0) >= per_task:
            continue
        counts[ep.task] = counts.get(ep.task, 0) + 1
        out.append(ep)
    return out


def policy_config(cfg: dict, stats: dict) -> dict:
    """The tiny OpenVLA-OFT's config from ``model`` of the config, ``stats`` its action
    statistics under ``unnorm_key``."""
    m = cfg["model"]
    pc = tiny_config(image_size=int(m["image_size"]), vocab_base=int(m["vocab_base"]))
    for vit in pc["wmrl"]["vision_configs"]:  # same patch grid / depth for both featurizers
        vit.update(m.get("vision") or {})
    pc["text_config"].update(m.get("text_config") or {})
    pc["wmrl"].update(m.get("wmrl") or {})
    pc["norm_stats"] = {cfg["unnorm_key"]: stats}
    return pc


def train_sft_policy(cfg: dict) -> dict:
    """conf/sft_policy.yaml's run: ``out_dir`` checked before any work, the episodes picked,
    the policy behaviour-cloned (``wmrl.pipeline.sft``), saved, checked in the simulator;
    returns the metrics written to ``out_dir/sft_metrics.json``."""
    check_output_dir(cfg["out_dir"], "policy", bool(cfg.get("overwrite")), key="out_dir")
    torch.set_num_threads(int(cfg.get("threads") or 1))
    dirs = cfg["data_dir"] if isinstance(cfg["data_dir"], list) else [cfg["data_dir"]]
    episodes = [e for d in dirs for e in select_episodes(TrajectoryDataset(d),
                                                         cfg.get("episodes_per_task"))]
    used = [e for e in episodes if e.success or not cfg["success_only"]]
    if not used:
        raise ValueError(f"data_dir {cfg['data_dir']}: no usable episodes (success_only="
                         f"{cfg['success_only']})")
    relabel = bool(cfg.get("relabel_with_expert"))
    labels = [sft.expert_labels(e) if relabel else e.actions for e in used]
    stats = sft.action_statistics(np.concatenate(labels), len(used))
    policy = build_policy(config=policy_config(cfg, stats), unnorm_key=cfg["unnorm_key"],
                          seed=int(cfg["seed"]))
    data = sft.ChunkBCDataset(used, stats, policy.chunk, policy.n_bins, cfg["success_only"],
                              relabel_with_expert=relabel)
    print(f"sft: {len(used)} episodes, {len(data)} samples, "
          f"{sum(p.numel() for p in policy.parameters())} params", flush=True)
    t0 = time.perf_counter()
    curve = sft.train_bc(policy, data, steps=int(cfg["steps"]), batch_size=int(cfg["batch_size"]),
                         lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]),
                         warmup=int(cfg["warmup"]), grad_clip=float(cfg["grad_clip"]),
                         label_smoothing=float(cfg["label_smoothing"]), seed=int(cfg["seed"]),
                         log_every=int(cfg["log_every"]),
                         log=lambda r: print(json.dumps(r), flush=True))
    train_s = time.perf_counter() - t0
    out_dir = os.path.abspath(cfg["out_dir"])
    policy.save_pretrained(out_dir)
    metrics = {"episodes": len(used), "samples": len(data), "train_seconds": round(train_s, 1),
               "curve": curve, "out_dir": out_dir}
    ev = cfg.get("eval") or {}
    if ev and int(ev.get("episodes_per_task") or 0) > 0:
        metrics["eval"] = sim_check(policy, ev)
    write_text(os.path.join(out_dir, "sft_metrics.json"), json.dumps(metrics, indent=2))
    return metrics


def sim_check(policy, ev: dict) -> dict:
    """Simulator success at the eval temperature, and the share of GRPO-style groups (at the
    RL temperature) whose outcomes are mixed."""
    common = dict(seed=int(ev["seed"]), num_envs=int(ev["num_envs"]), env=dict(ev["env"]))
    if ev.get("tasks"):
        common["tasks"] = list(ev["tasks"])
    res = evaluate_policy(policy, episodes_per_task=int(ev["episodes_per_task"]),
                          temperature=float(ev["temperature"]), **common)
    out = {"temperature": float(ev["temperature"]), "success": res.success,
           "overall": res.overall, "episodes": res.episodes, "seconds": round(res.seconds, 1)}
    print(json.dumps({"eval": out}), flush=True)
    g = int(ev["group_size"])
    grp = evaluate_policy(policy, episodes_per_task=int(ev["group_states_per_task"]),
                          temperature=float(ev["rl_temperature"]), repeats=g, **common)
    outcomes = [o for v in grp.outcomes.values() for o in v]
    out["groups"] = {"temperature": float(ev["rl_temperature"]), "group_size": g,
                     "success": grp.overall, "per_task": grp.success,
                     "mixed_fraction": mixed_group_fraction(outcomes, g),
                     "episodes": grp.episodes}
    print(json.dumps({"groups": out["groups"]}), flush=True)
    return out
