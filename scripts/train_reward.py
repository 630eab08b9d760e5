"""Train a ResNet success reward from frames + success labels.

    python scripts/train_reward.py data_dir=DATA out_dir=OUT [arch=resnet_task] [steps=...]
    python scripts/train_reward.py data_format=lerobot data_dir=LEROBOT out_dir=OUT \
        [lerobot.camera=KEY] [lerobot.last_frames=K]

Dataset (``load_reward_dataset``; adapt that one function for other layouts):
``DATA/frames.safetensors`` with ``frames`` uint8 [N, H, W, 3], ``labels`` [N] (0/1) and
optionally ``task_ids`` int [N]; ``DATA/tasks.json`` (list of task strings, index = id) for
``arch=resnet_task``. Output: ``OUT/model.safetensors`` + ``OUT/config.json`` (atomic writes)
+ ``OUT/metrics.json``; the loss is BCE on logits, optionally class-balanced.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wmrl.build  # noqa: E402,F401  (registers the ${wmrl_assets:} resolver env: interpolates)
from wmrl.finetune.reward_evaluation import binary_metrics  # noqa: E402
from wmrl.rewards.resnet import build_classifier, save_checkpoint, training_input  # noqa: E402


def load_reward_dataset(data_dir: str | Path) -> dict:
    """{"frames": uint8 [N,H,W,3], "labels": float [N], "task_ids": long [N] | None,
    "tasks": list[str] | None} from ``data_dir`` (format in the module docstring)."""
    root = Path(data_dir)
    path = root / "frames.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"data_dir {root}: missing frames.safetensors (tensors 'frames' "
                                "uint8 [N,H,W,3], 'labels' [N], optional 'task_ids' [N])")
    data = load_file(str(path))
    frames, labels = data.get("frames"), data.get("labels")
    if frames is None or labels is None:
        raise ValueError(f"{path}: needs tensors 'frames' and 'labels', has {sorted(data)}")
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"{path}: 'frames' must be uint8 [N,H,W,3], got {frames.dtype} "
                         f"{tuple(frames.shape)}")
    if labels.shape != frames.shape[:1]:
        raise ValueError(f"{path}: 'labels' shape {tuple(labels.shape)} != [N={frames.shape[0]}]")
    tasks_file = root / "tasks.json"
    task_ids = data.get("task_ids")
    return {
        "frames": frames,
        "labels": labels.float(),
        "task_ids": None if task_ids is None else task_ids.long(),
        "tasks": json.loads(tasks_file.read_text()) if tasks_file.is_file() else None,
    }


@torch.no_grad()
def recalibrate_batchnorm(model: torch.nn.Module, batches: list) -> None:
    """Re-estimate BatchNorm running stats as a plain average over ``batches`` of training
    data (momentum None): after a short run the EMA (momentum 0.1) still lags the weights,
    which makes eval-mode scores disagree with what training saw."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for x, t in batches:
        model(x, t)
    for m in norms:
        m.momentum = 0.1


def load_trajectory_frames(cfg: dict) -> dict:
    """``data_format: trajectories``: frames + per-frame success labels from simulator
    trajectory datasets (``data_dir``: one dir or a list; see wmrl/finetune/reward_data.py)."""
    from wmrl.finetune.reward_data import reward_frames_from_trajectories

    t = dict(cfg.get("trajectories") or {})
    frames, labels, task_ids, tasks = reward_frames_from_trajectories(
        cfg["data_dir"], tasks=t.get("tasks"), negative_stride=int(t.get("negative_stride", 1)))
    if t.get("vae_from"):  # add VAE-reconstructed copies (the world model's look)
        from wmrl.finetune.reward_data import vae_roundtrip

        frames = np.concatenate([frames, vae_roundtrip(frames, t["vae_from"])])
        labels, task_ids = np.tile(labels, 2), np.tile(task_ids, 2)
    if t.get("imagined_from"):  # + the world model's open-loop replays, simulator-labelled
        from wmrl.finetune.reward_data import imagined_frames

        f2, l2, i2, names = imagined_frames(cfg["data_dir"], t["imagined_from"],
                                            int(t["num_inference_steps"]), tasks=t.get("tasks"),
                                            negative_stride=int(t.get("negative_stride", 1)))
        ids_map = np.array([tasks.index(n) if n in tasks else -1 for n in names])
        if (ids_map < 0).any():
            raise ValueError(f"imagined_from: tasks {names} differ from the dataset's {tasks}")
        frames, labels = np.concatenate([frames, f2]), np.concatenate([labels, l2])
        task_ids = np.concatenate([task_ids, ids_map[i2]])
    return {"frames": torch.from_numpy(frames), "labels": torch.from_numpy(labels).float(),
            "task_ids": torch.from_numpy(task_ids), "tasks": tasks}


def load_lerobot_frames(cfg: dict) -> dict:
    """``data_format: lerobot``: frames + per-frame success labels from a LeRobot dataset
    (``data_dir``; its recorded success, or ``lerobot.last_frames``; see
    wmrl/finetune/reward_data.py), at the model's image size."""
    from wmrl.finetune.reward_data import reward_frames_from_lerobot  # (imports diffusers)

    lr = dict(cfg.get("lerobot") or {})
    frames, labels, task_ids, tasks = reward_frames_from_lerobot(
        cfg["data_dir"], camera=lr.get("camera"), size=(cfg.get("model") or {}).get("image_size"),
        negative_stride=int(lr.get("negative_stride", 1)), last_frames=lr.get("last_frames"))
    return {"frames": torch.from_numpy(frames), "labels": torch.from_numpy(labels).float(),
            "task_ids": torch.from_numpy(task_ids), "tasks": tasks}


LOADERS = {"frames": lambda cfg: load_reward_dataset(cfg["data_dir"]),
           "trajectories": load_trajectory_frames, "lerobot": load_lerobot_frames}


def train(cfg: dict) -> dict:
    """Fit, evaluate on a held-out split, save; returns the metrics dict."""
    fmt = cfg.get("data_format", "frames")
    if fmt not in LOADERS:
        raise ValueError(f"data_format must be one of {sorted(LOADERS)}, got {fmt!r}")
    data = LOADERS[fmt](cfg)
    arch, model_cfg = cfg["arch"], dict(cfg["model"])
    tasks = list(cfg.get("tasks") or data["tasks"] or [])
    if arch == "resnet_task":
        if data["task_ids"] is None or not tasks:
            raise ValueError("arch=resnet_task needs 'task_ids' in frames.safetensors and a task "
                             "list (tasks=[...] or tasks.json)")
        if int(data["task_ids"].max()) >= len(tasks):
            raise ValueError(f"task_ids reach {int(data['task_ids'].max())} but only "
                             f"{len(tasks)} tasks are listed")
        model_cfg["num_tasks"] = max(int(model_cfg.get("num_tasks", 10)), len(tasks))

    gen = torch.Generator().manual_seed(int(cfg["seed"]))
    n = data["frames"].shape[0]
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(n * float(cfg["val_fraction"])))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    if train_idx.numel() == 0:
        raise ValueError(f"val_fraction={cfg['val_fraction']} leaves no training frames (N={n})")

    device = torch.device(cfg["device"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(cfg["seed"]))
        model = build_classifier(arch, model_cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=float(cfg["lr"]),
                            weight_decay=float(cfg["weight_decay"]))
    labels = data["labels"]
    pos = float(labels[train_idx].sum())
    pos_weight = (train_idx.numel() - pos) / max(pos, 1.0) if cfg["balance"] else 1.0

    def batch(idx: torch.Tensor):
        x = training_input(data["frames"][idx], model_cfg.get("image_size"), device)
        t = None if data["task_ids"] is None else data["task_ids"][idx].to(device)
        return x, t, labels[idx].to(device)

    model.train()
    bs = int(cfg["batch_size"])
    for step in range(int(cfg["steps"])):
        idx = train_idx[torch.randint(train_idx.numel(), (min(bs, train_idx.numel()),),
                                      generator=gen)]
        x, t, y = batch(idx)
        loss = F.binary_cross_entropy_with_logits(
            model.logits(x, t), y, pos_weight=torch.tensor(pos_weight, device=device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cfg.get("log_every") and (step + 1) % int(cfg["log_every"]) == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)

    recalibrate_batchnorm(model, [batch(train_idx[i:i + bs])[:2]
                                   for i in range(0, min(train_idx.numel(), 16 * bs), bs)])
    model.eval()
    eval_idx = val_idx if n_val else train_idx
    with torch.no_grad():
        scores = torch.cat([model(*batch(eval_idx[i:i + 256])[:2]).cpu()
                            for i in range(0, eval_idx.numel(), 256)])
    metrics = {"split": "val" if n_val else "train", "n_train": int(train_idx.numel()),
               "n_eval": int(eval_idx.numel()), "final_loss": float(loss.detach()),
               **binary_metrics(scores, labels[eval_idx])}
    config = {"arch": arch, **model_cfg, "tasks": tasks if arch == "resnet_task" else None}
    out = save_checkpoint(model, config, cfg["out_dir"])
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def _hydra_main() -> None:
    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf", config_name="train_reward")
    def main(cfg) -> None:
        metrics = train(OmegaConf.to_container(cfg, resolve=True))
        print(json.dumps(metrics))

    main()


if __name__ == "__main__":
    _hydra_main()
