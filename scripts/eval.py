"""Evaluate a policy in the tabletop simulator (success_once on fixed initial states).

    python scripts/eval.py                                           # shipped SFT policy
    python scripts/eval.py ckpt_path=outputs/.../checkpoints/last.ckpt  # after GRPO
    python scripts/eval.py policy.pretrained_path=DIR temperature=1.6 num_videos=2 out_dir=OUT

The policy is built from the ``policy`` config group; ``ckpt_path`` then loads a Lightning
checkpoint written by ``scripts/fit.py`` (GRPOModule state dict, keys ``policy.<...>``) into
it with ``torch.load(weights_only=True)``. Prints a per-task table and one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import wmrl.config  # noqa: E402,F401  (registers the ${wmrl_assets:} resolver)
from wmrl.config import build  # noqa: E402
from wmrl.pipeline.evaluate import evaluate_policy, mixed_group_fraction, save_gif  # noqa: E402

PREFIX = "policy."


def policy_state_from_ckpt(path: str) -> dict[str, torch.Tensor]:
    """The policy's weights from a Lightning ``.ckpt`` (or a bare state dict) file."""
    if os.path.isdir(path):
        raise ValueError(f"ckpt_path {path} is a directory (a sharded/DCP checkpoint?): pass a "
                         "single .ckpt file, or a save_pretrained dir as policy.pretrained_path")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ckpt_path {path} does not exist")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise ValueError(f"ckpt_path {path}: expected a dict with 'state_dict', got {type(ckpt)}")
    policy = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
    if not policy:
        raise KeyError(f"ckpt_path {path}: no '{PREFIX}*' keys (found e.g. {sorted(state)[:5]}); "
                       "is it a GRPOModule checkpoint from scripts/fit.py?")
    return policy


def load_policy(policy_cfg, ckpt_path: str | None = None):
    policy = build(policy_cfg)
    if ckpt_path:
        state = policy_state_from_ckpt(ckpt_path)
        result = policy.load_state_dict(state, strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise KeyError(f"ckpt_path {ckpt_path} does not match the configured policy: missing "
                           f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}; "
                           "use the same policy config as the fit run")
    return policy.eval()


def run(cfg: dict) -> dict:
    torch.set_num_threads(int(cfg.get("threads") or 1))
    policy = load_policy(cfg["policy"], cfg.get("ckpt_path"))
    repeats = int(cfg.get("repeats") or 1)
    res = evaluate_policy(policy, tasks=list(cfg["tasks"]),
                          episodes_per_task=int(cfg["episodes_per_task"]),
                          temperature=float(cfg["temperature"]), seed=int(cfg["seed"]),
                          num_envs=int(cfg["num_envs"]), repeats=repeats,
                          num_videos=int(cfg.get("num_videos") or 0), env=dict(cfg["env"]))
    out = {"success": res.overall, "per_task": res.success, "episodes": res.episodes,
           "temperature": float(cfg["temperature"]), "seconds": round(res.seconds, 1),
           "ckpt_path": cfg.get("ckpt_path"),
           "pretrained_path": cfg["policy"].get("pretrained_path")}
    if repeats > 1:
        flat = [o for v in res.outcomes.values() for o in v]
        out["mixed_fraction"] = mixed_group_fraction(flat, repeats)
    print(format_table(res.success, res.outcomes))
    if cfg.get("out_dir"):
        os.makedirs(cfg["out_dir"], exist_ok=True)
        for i, (task, frames, ok) in enumerate(res.videos):
            save_gif(frames, os.path.join(cfg["out_dir"], f"{task}_{i}_{'ok' if ok else 'fail'}"
                                                          ".gif"))
        with open(os.path.join(cfg["out_dir"], "results.json"), "w") as f:
            json.dump(out, f, indent=2)
    return out


def format_table(success: dict[str, float], outcomes: dict[str, list[bool]]) -> str:
    rows = [f"{'task':<16}{'episodes':>9}{'success':>9}"]
    for k, v in success.items():
        rows.append(f"{k:<16}{len(outcomes[k]):>9d}{v:>9.3f}")
    flat = [o for v in outcomes.values() for o in v]
    rows.append(f"{'overall':<16}{len(flat):>9d}{sum(flat) / max(len(flat), 1):>9.3f}")
    return "\n".join(rows)


def _hydra_main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
    def main(cfg) -> None:
        print(json.dumps(run(OmegaConf.to_container(cfg, resolve=True))))

    main()


if __name__ == "__main__":
    _hydra_main()
