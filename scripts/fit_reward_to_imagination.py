"""Fine-tune a reward checkpoint on the world model's imagination of real episodes.

    python scripts/fit_reward_to_imagination.py data_dir=DATA out_dir=OUT \
        [reward_dir=REWARD_DIR] [world_model_dir=WM_DIR] [steps=300]

Each episode of ``data_dir`` (scripts/collect.py datasets) is replayed open loop in the world
model from its first frame; each imagined frame is labelled with the simulator's success label
of the same step; a stratified ``holdout`` share of the episodes scores the reward before and
after the fine-tune (wmrl/finetune/reward_on_imagination.py). Output: ``OUT/model.safetensors``
+ ``OUT/config.json`` (the source checkpoint's architecture) + ``OUT/metrics.json``, each
written atomically; ``reward.checkpoint=OUT`` loads it in a fit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import wmrl.build  # noqa: E402,F401  (registers the ${wmrl_assets:} resolver)
from wmrl.errors import exit_on_config_error  # noqa: E402
from wmrl.finetune.reward_on_imagination import (  # noqa: E402
    fit_reward_to_imagination,
    load_reward,
)
from wmrl.io.atomic import check_output_dir, write_text  # noqa: E402
from wmrl.rewards.resnet import save_checkpoint  # noqa: E402
from wmrl.sim.dataset import TrajectoryDataset  # noqa: E402
from wmrl.world_model.action_wan import ActionWanModel  # noqa: E402


def _shown(path) -> str:
    """A path for metrics.json: relative to the checkout when inside it (shipped assets)."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def run(cfg: dict) -> dict:
    """Replay, score, fine-tune, score, save; returns the metrics written to metrics.json."""
    check_output_dir(cfg["out_dir"], "reward", bool(cfg.get("overwrite")), key="out_dir")
    dirs = cfg["data_dir"] if isinstance(cfg["data_dir"], list) else [cfg["data_dir"]]
    episodes = [ep for d in dirs for ep in TrajectoryDataset(d)]
    if not episodes:
        raise ValueError(f"data_dir={dirs}: no episodes")
    reward, config = load_reward(str(cfg["reward_dir"]))
    world_model = ActionWanModel.from_pretrained(cfg["world_model_dir"]).eval()
    torch.manual_seed(int(cfg["seed"]))
    optimizer = torch.optim.AdamW(reward.model.parameters(), lr=float(cfg["lr"]))
    out = fit_reward_to_imagination(
        reward, optimizer, world_model, episodes, int(cfg["steps"]), int(cfg["batch_size"]),
        float(cfg["success_threshold"]), float(cfg["holdout"]),
        int(cfg["num_inference_steps"]), int(cfg["seed"]))
    losses = out.pop("losses")
    k = max(1, len(losses) // 10)
    metrics = {"reward_dir": _shown(cfg["reward_dir"]),
               "world_model_dir": _shown(cfg["world_model_dir"]),
               "data_dir": [_shown(d) for d in dirs], "episodes": len(episodes),
               "steps": int(cfg["steps"]), "success_threshold": float(cfg["success_threshold"]),
               "loss_first": sum(losses[:k]) / k if losses else None,
               "loss_last": sum(losses[-k:]) / k if losses else None, **out}
    save_checkpoint(reward.model, config or {"arch": "resnet", **reward.config}, cfg["out_dir"])
    write_text(str(Path(cfg["out_dir"]) / "metrics.json"), json.dumps(metrics, indent=2))
    return metrics


def _hydra_main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf",
                config_name="fit_reward_to_imagination")
    def main(cfg) -> None:
        m = exit_on_config_error(run, OmegaConf.to_container(cfg, resolve=True))
        b, a = m["before"], m["after"]
        print(f"reward on {m['held_out_episodes']} held-out replays: episode precision "
              f"{b['episode_precision']:.2f} -> {a['episode_precision']:.2f}, recall "
              f"{b['episode_recall']:.2f} -> {a['episode_recall']:.2f}, frame AUROC "
              f"{b['frame_auroc']:.3f} -> {a['frame_auroc']:.3f}; saved {cfg.out_dir}",
              flush=True)

    main()


if __name__ == "__main__":
    _hydra_main()
