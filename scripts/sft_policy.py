"""Behaviour-clone (SFT) the tiny OpenVLA-OFT on tabletop demos, save it, check it in the sim.

    python scripts/collect.py collect.out_dir=/tmp/demos collect.episodes_per_task=150
    python scripts/sft_policy.py data_dir=/tmp/demos [out_dir=...] [steps=3000] \
        [episodes_per_task=50] [eval.episodes_per_task=256]

Writes ``out_dir`` in the OpenVLA-OFT layout (``build_policy(pretrained_path=out_dir,
unnorm_key=<unnorm_key>)`` loads it) plus ``sft_metrics.json`` (training curve, simulator
success per task at the eval temperature, and the fraction of GRPO-style groups with mixed
outcomes at the RL temperature). Targets and statistics: ``wmrl/pipeline/sft.py``. An
``out_dir`` holding anything but a policy wmrl wrote is refused in one line before any work
(``overwrite=true`` replaces it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import wmrl.build  # noqa: E402,F401  (registers the ${wmrl_assets:} resolver)
from wmrl.errors import exit_on_config_error  # noqa: E402
from wmrl.eval.evaluate import evaluate_policy, mixed_group_fraction  # noqa: E402
from wmrl.io.atomic import check_output_dir  # noqa: E402
from wmrl.pipeline import sft  # noqa: E402
from wmrl.policies.configs import tiny_config  # noqa: E402
from wmrl.policies.openvla_oft import build_policy  # noqa: E402
from wmrl.sim.dataset import TrajectoryDataset  # noqa: E402


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
    m = cfg["model"]
    pc = tiny_config(image_size=int(m["image_size"]), vocab_base=int(m["vocab_base"]))
    for vit in pc["wmrl"]["vision_configs"]:  # same patch grid / depth for both featurizers
        vit.update(m.get("vision") or {})
    pc["text_config"].update(m.get("text_config") or {})
    pc["wmrl"].update(m.get("wmrl") or {})
    pc["norm_stats"] = {cfg["unnorm_key"]: stats}
    return pc


def run(cfg: dict) -> dict:
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
    with open(os.path.join(out_dir, "sft_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    return metrics


def sim_check(policy, ev: dict) -> dict:
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


def _hydra_main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf", config_name="sft_policy")
    def main(cfg) -> None:
        m = exit_on_config_error(run, OmegaConf.to_container(cfg, resolve=True))
        print(json.dumps({k: v for k, v in m.items() if k != "curve"}))

    main()


if __name__ == "__main__":
    _hydra_main()
