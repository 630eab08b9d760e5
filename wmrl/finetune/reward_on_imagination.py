"""A reward fitted to the world model's imagination.

The env's reward model judges imagined frames, but it learnt success from simulator frames
(and their VAE reconstructions). Here it is fine-tuned on what the world model imagines for
real episodes of the current policy. Each episode's first frame and actions are replayed open
loop in the world model (``reward_data.imagined_replays``). Imagined frame t (after action
t - 1) is labelled with the simulator's success label of frame t. The episodes are split,
stratified by outcome (``split_episodes``). The held-out ones measure, before and after the
fine-tune, how well the reward's verdict on imagined frames matches what really happened
(``replay_metrics``), at the env's threshold h (``env.success_threshold``):

    frame:    pred_t = 1[p_t >= h]            against the simulator's label of frame t
    episode:  pred_i = 1[max_t p_t >= h]      against the real episode's success (the env's
                                              rule for an imagined success)

plus the AUROC of both (threshold-free: do imagined successes and failures look different?).
The fine-tune is the one reward trainer's (``reward_trainer.finetune_reward_model``):
class-balanced BCE on logits z,

    L = -mean[w y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))],   w = n_neg / n_pos,

with BatchNorm kept in eval mode (a few small batches would skew its running statistics), the
gradient's norm clipped to 1.

Used by PACE rounds (``pace.reward_frames=imagined``, wmrl/pace/round.py) and once, on the
SFT policy's episodes, by ``scripts/fit_reward_to_imagination.py`` (a stage of
``make assets``; ``fit_and_save``: a checkpoint in, a checkpoint + metrics.json out).
docs/rewards.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from wmrl.finetune.reward_data import imagined_replays
from wmrl.finetune.reward_evaluation import binary_metrics, ranking_metrics
from wmrl.finetune.reward_trainer import finetune_reward_model
from wmrl.finetune.threshold_calibration import rate_matching_threshold
from wmrl.io.atomic import check_output_dir, write_text
from wmrl.rewards.resnet import (
    ResNetSuccessReward,
    TaskResNetSuccessReward,
    read_checkpoint,
    save_checkpoint,
)
from wmrl.sim.dataset import Episode, TrajectoryDataset
from wmrl.world_model.action_wan import ActionWanModel

ROOT = Path(__file__).resolve().parents[2]  # the checkout: metrics.json shows paths in it short
REWARDS = {"resnet": ResNetSuccessReward, "resnet_task": TaskResNetSuccessReward}


def load_reward(path: str):
    """(reward model, its config.json) of a scripts/train_reward.py checkpoint dir."""
    if not (Path(path) / "model.safetensors").is_file():
        raise FileNotFoundError(f"reward_dir={path}: not a reward checkpoint dir (no "
                                "model.safetensors); point it at scripts/train_reward.py's out_dir")
    _, config = read_checkpoint(path)
    arch = (config or {}).get("arch", "resnet")
    if arch not in REWARDS:
        raise ValueError(f"reward_dir={path}: arch {arch!r} is not one of {sorted(REWARDS)}")
    return REWARDS[arch](checkpoint=path, round=False), config


def split_episodes(successes: Sequence[bool], holdout: float,
                   seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) episode indices: of each outcome c (success, failure) with n_c
    episodes, ``floor(holdout * n_c + 1/2)`` held out, at least one where n_c >= 2 and
    ``holdout`` > 0 (so both outcomes are scored), drawn by a permutation seeded with
    ``seed``; the training side keeps at least one episode."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    y = np.asarray(successes, dtype=bool)
    rng = np.random.default_rng(seed)
    held = []
    for c in (True, False):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(np.floor(holdout * len(idx) + 0.5))
        if holdout > 0 and len(idx) >= 2:
            k = max(k, 1)
        held += idx[:k].tolist()
    if len(held) >= len(y):
        held = held[: len(y) - 1]
    held_set = set(held)
    return [i for i in range(len(y)) if i not in held_set], sorted(held)


def frame_labels(episode: Episode) -> np.ndarray:
    """float [T]: the simulator's success label of frames 1..T (those an open-loop replay
    imagines)."""
    return episode.success_labels[1:].astype(np.float32)


@torch.no_grad()
def replay_scores(reward, videos: Sequence[np.ndarray],
                  tasks: Sequence[str]) -> list[torch.Tensor]:
    """The reward's score of every imagined frame: float [T_i] per episode."""
    return [reward(torch.from_numpy(v)[None], [t])[0].float().cpu()
            for v, t in zip(videos, tasks)]


def replay_metrics(reward, videos: Sequence[np.ndarray], episodes: Sequence[Episode],
                   threshold: float) -> dict[str, float]:
    """Frame and episode precision / recall of the reward on imagined frames against the
    simulator (module docstring); ``episode_wm_success`` / ``episode_real_success``: the
    shares of imagined and real successes; ``rate_matching_threshold``: the grid threshold
    at which the imagined share is closest to the real one
    (``threshold_calibration.rate_matching_threshold``, here on open-loop replays)."""
    if not episodes:
        return {}
    scores = replay_scores(reward, videos, [ep.task for ep in episodes])
    s = torch.cat(scores)
    y = torch.from_numpy(np.concatenate([frame_labels(ep) for ep in episodes]))
    frame = binary_metrics(s, y, threshold)
    peaks = torch.stack([x.max() for x in scores])
    real = torch.tensor([ep.success for ep in episodes], dtype=torch.float32)
    episode = binary_metrics(peaks, real, threshold)
    return {"frame_precision": frame["precision"], "frame_recall": frame["recall"],
            "frame_auroc": ranking_metrics(s, y)["auroc"],
            "episode_precision": episode["precision"], "episode_recall": episode["recall"],
            "episode_accuracy": episode["accuracy"], "episode_auroc": ranking_metrics(peaks, real)["auroc"],
            "episode_wm_success": float((peaks >= threshold).float().mean()),
            "episode_real_success": float(real.mean()),
            "rate_matching_threshold": rate_matching_threshold(peaks.numpy(),
                                                               float(real.mean()))}


def fit_reward_to_imagination(reward, optimizer: torch.optim.Optimizer, world_model,
                              episodes: Sequence[Episode], steps: int, batch_size: int,
                              threshold: float, holdout: float, num_inference_steps: int,
                              seed: int = 0) -> dict:
    """Replay ``episodes`` in ``world_model`` (an ``ActionWanModel``), split them, score the
    held-out replays, fine-tune ``reward`` on the training replays, score again. Returns
    ``{"losses", "before", "after", "train_episodes", "held_out_episodes",
    "train_frames", "train_positive_frames"}``."""
    videos = imagined_replays(world_model, episodes, num_inference_steps=num_inference_steps,
                              seed=seed)
    train, held = split_episodes([ep.success for ep in episodes], holdout, seed)
    held_eps, held_videos = [episodes[i] for i in held], [videos[i] for i in held]
    before = replay_metrics(reward, held_videos, held_eps, threshold)
    frames = torch.from_numpy(np.concatenate([videos[i] for i in train]))
    labels = torch.from_numpy(np.concatenate([frame_labels(episodes[i]) for i in train]))
    tasks = [episodes[i].task for i in train for _ in range(len(videos[i]))]
    gen = torch.Generator().manual_seed(seed)
    losses = finetune_reward_model(reward, optimizer, frames, labels, tasks, steps, batch_size,
                                   gen)
    after = replay_metrics(reward, held_videos, held_eps, threshold)
    return {"losses": losses, "before": before, "after": after,
            "train_episodes": len(train), "held_out_episodes": len(held),
            "train_frames": len(labels), "train_positive_frames": int(labels.sum())}


def _shown(path) -> str:
    """A path for metrics.json: relative to the checkout when inside it (shipped assets)."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def fit_and_save(cfg: dict) -> dict:
    """conf/fit_reward_to_imagination.yaml's run: ``out_dir`` checked, then replay, score,
    fine-tune, score, save; returns the metrics written to ``out_dir/metrics.json``."""
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
