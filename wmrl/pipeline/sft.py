"""Behaviour cloning (SFT) of OpenVLA-OFT on simulator trajectories: (image, task) -> 56 bins.

Targets follow OpenVLA's data pipeline, so a trained policy decodes with its own
``ActionStats`` (``wmrl.policies.action_tokenizer``) exactly as a published checkpoint does:

* gripper: env command g in {-1 open, +1 close} -> OpenVLA's [0 close, 1 open], u = (1 - g) / 2
  (the policy's ``gripper: libero`` mapping -sign(2u - 1) turns it back);
* statistics: per-dim q01 / q99 of the (converted) actions; ``mask`` false for the gripper;
* normalise (BOUNDS_Q99): x = clip(2 (a - q01) / (q99 - q01 + 1e-8) - 1, -1, 1) on masked dims,
  x = u for the gripper;
* discretise: edges = linspace(-1, 1, n_bins), bin b = clip(digitize(x, edges) - 1, 0, n_bins-1)
  (OpenVLA's token id is vocab_base - digitize(x), i.e. vocab_base - 1 - b).
* labels: the executed actions, or (``relabel_with_expert``, DART-style) the scripted expert's
  noise-free action at every stored state, so demos collected with execution noise teach the
  recovery from off-path states instead of the noise;
* chunks: the sample at step t is frame t with actions t .. t+C-1; steps past the end of the
  episode repeat its last action (as OFT's chunked RLDS loader does).

The loss is the mean cross-entropy of the 56 bin logits (``policy.action_logits``), i.e.
-mean log pi(bins | image, task) at temperature 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from wmrl.algorithms.lr_schedule import lr_multiplier
from wmrl.sim.expert import ScriptedExpert

GRIPPER_DIM = 6


def gripper_env_to_unit(g: np.ndarray) -> np.ndarray:
    """env gripper command (-1 open, +1 close; sign decides) -> OpenVLA [0 close, 1 open]."""
    return (np.sign(np.asarray(g, dtype=np.float64)) < 0).astype(np.float64)


def to_dataset_actions(env_actions: np.ndarray) -> np.ndarray:
    """env actions [..., 7] -> the dataset's action convention (gripper in [0, 1])."""
    a = np.asarray(env_actions, dtype=np.float64).copy()
    a[..., GRIPPER_DIM] = gripper_env_to_unit(a[..., GRIPPER_DIM])
    return a


def action_statistics(env_actions: np.ndarray, num_trajectories: int = 0) -> dict:
    """OpenVLA ``dataset_statistics.json`` entry {"action": {mean, std, min, max, q01, q99, mask},
    "num_transitions", "num_trajectories"} for env actions [N, 7]."""
    a = to_dataset_actions(env_actions)
    if a.ndim != 2 or a.shape[1] != 7 or a.shape[0] == 0:
        raise ValueError(f"need env actions [N>0, 7] for statistics, got {a.shape}")
    mask = [True] * GRIPPER_DIM + [False]
    return {
        "action": {
            "mean": a.mean(0).tolist(), "std": a.std(0).tolist(),
            "min": a.min(0).tolist(), "max": a.max(0).tolist(),
            "q01": np.quantile(a, 0.01, axis=0).tolist(),
            "q99": np.quantile(a, 0.99, axis=0).tolist(),
            "mask": mask,
        },
        "num_transitions": int(a.shape[0]),
        "num_trajectories": int(num_trajectories),
    }


def normalize_actions(env_actions: np.ndarray, stats: dict) -> np.ndarray:
    """env actions [..., 7] -> normalised [-1, 1] values (BOUNDS_Q99; gripper in [0, 1])."""
    s = stats["action"]
    q01, q99 = np.asarray(s["q01"]), np.asarray(s["q99"])
    mask = np.asarray(s["mask"], dtype=bool)
    a = to_dataset_actions(env_actions)
    x = np.clip(2 * (a - q01) / (q99 - q01 + 1e-8) - 1, -1, 1)
    return np.where(mask, x, a)


def actions_to_bins(env_actions: np.ndarray, stats: dict, n_bins: int = 256) -> np.ndarray:
    """env actions [..., 7] -> bin indices int64 [..., 7] in [0, n_bins)."""
    edges = np.linspace(-1, 1, n_bins)
    x = normalize_actions(env_actions, stats)
    return np.clip(np.digitize(x, edges) - 1, 0, n_bins - 1).astype(np.int64)


def expert_labels(episode, expert=None) -> np.ndarray:
    """The scripted expert's clean action at each of the episode's states -> float32 [T, 7]."""
    if episode.states is None:
        raise ValueError("relabel_with_expert needs episodes with privileged states "
                         "(collect them with scripts/collect.py)")
    expert = expert or ScriptedExpert()
    states = episode.states[: len(episode)]
    return np.stack([expert.clean_action(st, episode.task) for st in states]).astype(np.float32)


class ChunkBCDataset:
    """Every (episode, step t) of a trajectory dataset as (frame t, task, 56 target bins).

    Frames stay uint8 [N, H, W, 3] at the dataset's size; the policy resizes them itself."""

    def __init__(self, episodes, stats: dict, chunk: int = 8, n_bins: int = 256,
                 success_only: bool = True, relabel_with_expert: bool = False):
        frames, tasks, bins = [], [], []
        for ep in episodes:
            if success_only and not ep.success:
                continue
            t_len = len(ep)
            if t_len == 0:
                continue
            actions = expert_labels(ep) if relabel_with_expert else ep.actions
            idx = np.minimum(np.arange(t_len)[:, None] + np.arange(chunk)[None], t_len - 1)
            bins.append(actions_to_bins(actions[idx], stats, n_bins).reshape(t_len, -1))
            frames.append(ep.frames[:t_len])
            tasks += [ep.task] * t_len
        if not frames:
            raise ValueError("no (successful) episodes with actions to clone: collect demos "
                             "with scripts/collect.py first")
        self.frames = torch.from_numpy(np.concatenate(frames))
        self.bins = torch.from_numpy(np.concatenate(bins))
        self.tasks = tasks

    def __len__(self) -> int:
        return int(self.bins.shape[0])

    def batch(self, idx: torch.Tensor) -> tuple[dict, torch.Tensor]:
        obs = {"image": self.frames[idx], "task": [self.tasks[i] for i in idx.tolist()]}
        return obs, self.bins[idx]


def bc_loss(policy, obs: dict, bins: torch.Tensor, label_smoothing: float = 0.0):
    """Mean cross-entropy over the 56 action tokens; also returns token accuracy."""
    logits = policy.action_logits(obs)  # [B, L, n_bins]
    bins = bins.to(logits.device)
    loss = F.cross_entropy(logits.flatten(0, 1), bins.flatten(), label_smoothing=label_smoothing)
    acc = (logits.argmax(-1) == bins).float().mean()
    return loss, acc


def train_bc(policy, data: ChunkBCDataset, steps: int, batch_size: int = 64, lr: float = 1e-3,
             weight_decay: float = 0.01, warmup: int = 50, grad_clip: float = 1.0,
             label_smoothing: float = 0.0, seed: int = 0, log_every: int = 50,
             log: Callable[[dict], None] | None = None) -> list[dict]:
    """AdamW with linear warm-up then cosine decay to 0.1 lr; returns the logged rows."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"sft steps and batch_size must be >= 1, got {steps}, {batch_size}")
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=weight_decay)

    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_multiplier(step, steps, "cosine", warmup, min_ratio=0.1))
    policy.train()
    rows, t0, run_loss, run_acc, n = [], time.perf_counter(), 0.0, 0.0, 0
    for step in range(steps):
        idx = torch.randint(len(data), (batch_size,), generator=gen)
        obs, bins = data.batch(idx)
        loss, acc = bc_loss(policy, obs, bins, label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip)
        opt.step()
        sched.step()
        run_loss, run_acc, n = run_loss + loss.item(), run_acc + acc.item(), n + 1
        if (step + 1) % log_every == 0 or step + 1 == steps:
            row = {"step": step + 1, "loss": run_loss / n, "token_acc": run_acc / n,
                   "lr": sched.get_last_lr()[0], "seconds": round(time.perf_counter() - t0, 1)}
            rows.append(row)
            if log:
                log(row)
            run_loss, run_acc, n = 0.0, 0.0, 0
    policy.eval()
    return rows
