"""How faithful a world model is over a whole episode (``scripts/wm_report.py``).

Each recorded episode (a trajectory dataset of ``scripts/collect.py`` or a LeRobot dataset) is
replayed open loop through ``WanWorldModelEnv``: the env starts from the episode's first frame
and is fed the recorded actions chunk by chunk (``open_loop_replay``, ``chunk_actions``); after
the first chunk its context is its own frames, exactly as in a fit's episode. Chunks past an
episode's end are hold actions; every episode is scored at frame t_c = min(CHUNK * c, T) of
chunk c = 1..n (T its number of actions), imagined x̂_t against recorded x_t (an episode that
ended before chunk c is scored on its last frame; the copy-last-true baseline is then exact,
PSNR at its 100 dB cap, so compare that column on episodes of equal length, as a fit's are):

* PSNR and SSIM (``wmrl.finetune.image_metrics``), beside two baselines on the same frames:
  copy the first frame (x_0 for x_t) and copy the last true frame of the previous chunk
  (x_{t_{c-1}} for x_t, the one-chunk-from-true-frames setting of the fine-tune's validation);
* each block of ``wmrl.sim.tasks.BLOCKS`` by its colour rule (red: r - max(g, b) > 60, blue:
  b - max(r, g) > 60): its centre = the mean (row, col) of its pixels, the error
  ||c(x̂_t) - c(x_t)||_2 in px (median and mean over the episodes where the block is in both
  frames; the copy-first-frame error beside it), and ``vanished`` = the fraction of the
  episodes whose recorded frame shows the block where the imagined one has no pixel of it.
  The recorded side is the colour rule on the simulator's rendered frames, not the privileged
  state: ``Episode.states`` holds world positions, and their pixels need the camera of the
  MuJoCo scene (this module never loads MuJoCo). Two blocks merging is not measured;
* with a reward (a ``scripts/train_reward.py`` checkpoint dir): per episode, success = max_t
  p(x_t) >= threshold over frames 1..T, imagined against recorded (the reward's verdict on the
  simulator's frames is the truth here): precision tp / (tp + fp), recall tp / (tp + fn),
  balanced accuracy (TPR + TNR) / 2 (``success_confusion``).

``fidelity_report`` returns the report (JSON-ready) and the frames for the figure;
``write_report`` writes ``report.json`` and ``report.png`` into one folder, whole or not at all.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.errors import ConfigError
from wmrl.finetune.image_metrics import psnr, ssim, u8_video_to_unit
from wmrl.finetune.reward_on_imagination import load_reward
from wmrl.finetune.world_model import episode_initial_states, open_loop_replay, success_confusion
from wmrl.io.atomic import atomic_dir, check_output_dir
from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.sim.dataset import Episode, TrajectoryDataset
from wmrl.sim.tasks import BLOCKS
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.clip_layout import CHUNK
from wmrl.world_model.files import CONFIG_FILES, is_world_model_dir

WRITER = "wm_report"
COLOUR_MARGIN = 60  # a block's pixel: its channel exceeds both others by more than this
CHANNEL = {"red": 0, "green": 1, "blue": 2}


# ---------------------------------------------------------------------------- episodes
def load_episodes(path: str | Path, max_episodes: int | None = None) -> list[Episode]:
    """The first ``max_episodes`` episodes of a trajectory dataset or a LeRobot dataset
    (``meta/info.json``): a LeRobot episode of T rows gives T frames and its first T - 1
    actions (the last row's outcome frame is not recorded); its success labels are
    ``next.success`` shifted onto the frame they describe."""
    path = Path(path)
    if (path / "meta" / "info.json").is_file():
        ds, eps = LeRobotDataset(path), []
        for i in range(min(ds.num_episodes, max_episodes or ds.num_episodes)):
            ep = ds.episode(i)
            labels = np.zeros(len(ep.frames), bool)
            if ep.success is not None:
                labels[1:] = ep.success[:-1]
            eps.append(Episode(ep.frames, ep.actions[:-1, :7].astype(np.float32), labels,
                               ep.task))
        return eps
    ds = TrajectoryDataset(path)
    return [ds[i] for i in range(min(len(ds), max_episodes or len(ds)))]


# ---------------------------------------------------------------------------- metrics
def block_centres(frames: np.ndarray, colour: str) -> tuple[np.ndarray, np.ndarray]:
    """(centre float [..., 2] as (row, col), present bool [...]) of the pixels of ``colour``
    (its channel - max(other two) > COLOUR_MARGIN) in uint8 frames [..., H, W, 3]; the
    centre is NaN where no pixel has the colour."""
    f = frames.astype(np.int16)
    k = CHANNEL[colour]
    others = np.delete(f, k, axis=-1).max(-1)
    mask = (f[..., k] - others) > COLOUR_MARGIN  # [..., H, W]
    count = mask.sum((-2, -1))
    rows = np.arange(mask.shape[-2])[:, None]
    cols = np.arange(mask.shape[-1])[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.stack([(mask * rows).sum((-2, -1)) / count,
                           (mask * cols).sum((-2, -1)) / count], -1)
    return centre, count > 0


def block_errors(imagined: np.ndarray, recorded: np.ndarray, first: np.ndarray,
                 colour: str) -> dict:
    """A block's centre error and vanishing over a batch of frames [B, H, W, 3] (see the
    module doc); None (JSON null) for a figure with no episode to average."""
    ci, pi = block_centres(imagined, colour)
    cr, pr = block_centres(recorded, colour)
    cf, pf = block_centres(first, colour)
    both, base = pi & pr, pf & pr
    err = np.linalg.norm(ci - cr, axis=-1)[both]
    copy = np.linalg.norm(cf - cr, axis=-1)[base]
    return {"median_px": float(np.median(err)) if err.size else None,
            "mean_px": float(err.mean()) if err.size else None,
            "copy_first_median_px": float(np.median(copy)) if copy.size else None,
            "vanished": float((pr & ~pi).sum() / pr.sum()) if pr.any() else None,
            "recorded_present": int(pr.sum())}


def image_scores(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean PSNR dB, mean SSIM) of uint8 frames x against y [B, H, W, 3]."""
    a, b = u8_video_to_unit(torch.from_numpy(x)), u8_video_to_unit(torch.from_numpy(y))
    return float(psnr(a, b).mean()), float(ssim(a, b).mean())


def chunk_row(c: int, imagined: np.ndarray, episodes: Sequence[Episode],
              chunk: int = CHUNK) -> dict:
    """Chunk ``c``'s figures: imagined [B, F, H, W, 3] (frame 0 the first frame) against each
    episode's recorded frame at t_c = min(chunk * c, T), and the two baselines."""
    t = [min(chunk * c, len(ep)) for ep in episodes]
    prev = [min(chunk * (c - 1), len(ep)) for ep in episodes]
    rec = np.stack([ep.frames[i] for ep, i in zip(episodes, t)])
    img = np.stack([imagined[b, i] for b, i in enumerate(t)])
    first = np.stack([ep.frames[0] for ep in episodes])
    last_true = np.stack([ep.frames[i] for ep, i in zip(episodes, prev)])
    row = {"chunk": c, "frame": chunk * c}
    row["psnr"], row["ssim"] = image_scores(img, rec)
    row["copy_first_psnr"], row["copy_first_ssim"] = image_scores(first, rec)
    row["copy_last_true_psnr"], row["copy_last_true_ssim"] = image_scores(last_true, rec)
    row["blocks"] = {b: block_errors(img, rec, first, b) for b in BLOCKS}
    return row


def reward_verdicts(imagined_scores: np.ndarray, recorded_scores: Sequence[np.ndarray],
                    episodes: Sequence[Episode], threshold: float) -> dict:
    """Imagined vs recorded success per episode by the reward (see the module doc):
    ``imagined_scores`` [B, F] p(success) of the imagined frames (index 0 = the first frame),
    ``recorded_scores`` one [T + 1] array per episode."""
    wm = np.array([imagined_scores[b, 1 : len(ep) + 1].max() >= threshold
                   for b, ep in enumerate(episodes)])
    rec = np.array([s[1 : len(ep) + 1].max() >= threshold
                    for s, ep in zip(recorded_scores, episodes)])
    out = success_confusion(wm, rec)
    out["precision"] = out["tp"] / max(out["tp"] + out["fp"], 1)
    out["recall"] = out["tp"] / max(out["tp"] + out["fn"], 1)
    out["recorded_success"] = float(rec.mean())
    out["threshold"] = float(threshold)
    return out


# ---------------------------------------------------------------------------- the replay
@torch.no_grad()
def imagine(model, reward: Callable | None, episodes: Sequence[Episode], num_inference_steps: int,
            seed: int, chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """(frames uint8 [B, 1 + chunk * n, H, W, 3], p(success) [B, 1 + chunk * n], 0 for the
    first frame) of the open-loop replay of ``episodes`` (n = chunks of the longest), never
    terminated; without a reward the scores are zeros."""
    h, w = episodes[0].frames.shape[1:3]
    score = reward if reward is not None else (lambda f, tasks=None, env_ids=None:
                                               torch.zeros(f.shape[:2]))
    env = WanWorldModelEnv(model, score, episode_initial_states(episodes),
                           num_envs=len(episodes), num_inference_steps=num_inference_steps,
                           height=h, width=w, seed=seed, return_frames=True, chunk=chunk)
    env.success_threshold = float("inf")  # never terminate: every chunk is imagined
    n_chunks = max(math.ceil(len(ep) / chunk) for ep in episodes)
    infos = open_loop_replay(env, episodes, n_chunks, chunk)
    first = np.stack([ep.frames[0] for ep in episodes])[:, None]
    frames = np.concatenate([first] + [inf["frames"].cpu().numpy() for inf in infos], 1)
    scores = torch.cat([torch.zeros(len(episodes), 1)] + [inf["scores"].float().cpu()
                                                           for inf in infos], 1)
    return frames, scores.numpy()


def fidelity_report(model, episodes: Sequence[Episode], reward: Callable | None = None,
                    success_threshold: float = 0.99, num_inference_steps: int = 5,
                    seed: int = 0, batch_size: int = 64, chunk: int = CHUNK,
                    log: Callable[[str], None] = print) -> tuple[dict, np.ndarray]:
    """(report, imagined frames [B, F, H, W, 3]) of ``episodes`` replayed through ``model``
    ``batch_size`` at a time; one printed line per chunk."""
    if not episodes:
        raise ValueError("no episodes to replay: the dataset is empty")
    t0 = time.perf_counter()
    parts = [imagine(model, reward, episodes[i : i + batch_size], num_inference_steps, seed,
                     chunk) for i in range(0, len(episodes), batch_size)]
    width = max(p[0].shape[1] for p in parts)
    frames = np.concatenate([_pad(p[0], width) for p in parts])
    scores = np.concatenate([_pad(p[1], width) for p in parts])
    rows = []
    for c in range(1, (width - 1) // chunk + 1):
        rows.append(chunk_row(c, frames, episodes, chunk))
        r = rows[-1]
        blocks = "  ".join(f"{b} {_num(v['median_px']):.1f}/{_num(v['mean_px']):.1f}px gone "
                           f"{v['vanished']:.0%}" for b, v in r["blocks"].items()
                           if v["recorded_present"])
        log(f"chunk {c} (frame {r['frame']}): PSNR {r['psnr']:.2f} dB (copy first "
            f"{r['copy_first_psnr']:.2f}, copy last true {r['copy_last_true_psnr']:.2f})  SSIM "
            f"{r['ssim']:.3f} ({r['copy_first_ssim']:.3f}, {r['copy_last_true_ssim']:.3f})  "
            f"{blocks}")
    report = {"n_episodes": len(episodes), "n_chunks": len(rows), "chunk": chunk,
              "num_inference_steps": num_inference_steps, "seed": seed,
              "image_size": list(episodes[0].frames.shape[1:3]), "chunks": rows,
              "reward": None}
    if reward is not None:
        recorded = [reward(torch.from_numpy(ep.frames)[None], [ep.task])[0].float().numpy()
                    for ep in episodes]
        report["reward"] = reward_verdicts(scores, recorded, episodes, success_threshold)
    report["seconds"] = time.perf_counter() - t0
    return report, frames


def _num(v: float | None) -> float:
    return float("nan") if v is None else v


def _pad(x: np.ndarray, width: int) -> np.ndarray:
    """Pad axis 1 to ``width`` with its last entry (a shorter batch's hold)."""
    if x.shape[1] == width:
        return x
    return np.concatenate([x, np.repeat(x[:, -1:], width - x.shape[1], 1)], 1)


# ---------------------------------------------------------------------------- the command
def run_report(world_model: str | Path, episodes: str | Path, out: str | Path,
               reward: str | Path | None = None, max_episodes: int | None = None,
               seed: int = 0, num_inference_steps: int = 5, success_threshold: float = 0.99,
               force: bool = False) -> dict:
    """``scripts/wm_report.py``: ``--out`` checked before anything loads, then the world model
    (``save_pretrained``'s folder), the episodes, the reward, the replay and the outputs."""
    check_output_dir(out, WRITER, force=force, key="--out")
    if not is_world_model_dir(world_model):
        raise ConfigError(f"WORLD_MODEL={world_model} is not a world-model folder (no "
                          f"{' / '.join(CONFIG_FILES)}): give ActionWanModel.save_pretrained's "
                          "folder, e.g. wmrl/assets/world_model")
    if not ((Path(episodes) / "meta.json").is_file()
            or (Path(episodes) / "meta" / "info.json").is_file()):
        raise ConfigError(f"EPISODES={episodes} is neither a trajectory dataset (meta.json: "
                          "scripts/collect.py) nor a LeRobot dataset (meta/info.json)")
    if reward is not None and not (Path(reward) / "model.safetensors").is_file():
        raise ConfigError(f"--reward={reward} is not a reward checkpoint dir (no "
                          "model.safetensors): give scripts/train_reward.py's out_dir")
    model = ActionWanModel.from_pretrained(world_model)
    eps = load_episodes(episodes, max_episodes)
    score = None if reward is None else load_reward(str(reward))[0]
    report, frames = fidelity_report(model, eps, score, success_threshold, num_inference_steps,
                                     seed)
    report.update(world_model=str(world_model), episodes=str(episodes),
                  reward_checkpoint=None if reward is None else str(reward))
    write_report(out, report, frames, eps, force=force)
    return report


# ---------------------------------------------------------------------------- outputs
def write_report(out: str | Path, report: dict, frames: np.ndarray,
                 episodes: Sequence[Episode], strip_episodes: int = 3,
                 force: bool = False) -> Path:
    """``out/report.json`` and ``out/report.png`` (each metric against the chunk; below, for
    the first ``strip_episodes`` episodes, the imagined frame at each chunk's end over the
    recorded one), the folder written whole."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = report["chunks"]
    c = [r["chunk"] for r in rows]
    fig = plt.figure(figsize=(14, 8))
    grid = fig.add_gridspec(2, 4, height_ratios=[1, 1.2])
    for k, (key, unit) in enumerate((("psnr", "dB"), ("ssim", ""))):
        ax = fig.add_subplot(grid[0, k])
        for name, label in ((key, "world model"), (f"copy_first_{key}", "copy first frame"),
                            (f"copy_last_true_{key}", "copy last true frame")):
            ax.plot(c, [r[name] for r in rows], marker="o", label=label)
        ax.set(xlabel="chunk", ylabel=f"{key.upper()} {unit}".strip())
        ax.legend(fontsize=7)
    ax_err, ax_gone = fig.add_subplot(grid[0, 2]), fig.add_subplot(grid[0, 3])
    for b in BLOCKS:
        if not any(r["blocks"][b]["recorded_present"] for r in rows):
            continue
        for stat, style in (("median_px", "-o"), ("mean_px", "--o")):
            ax_err.plot(c, [_num(r["blocks"][b][stat]) for r in rows], style, color=b,
                        label=f"{b} {stat[:-3]}")
        ax_err.plot(c, [_num(r["blocks"][b]["copy_first_median_px"]) for r in rows], ":", color=b,
                    label=f"{b} copy first (median)")
        ax_gone.plot(c, [100 * _num(r["blocks"][b]["vanished"]) for r in rows], "-o", color=b, label=b)
    ax_err.set(xlabel="chunk", ylabel="block centre error (px)")
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_gone.set(xlabel="chunk", ylabel="block vanished (% of episodes)")
    for ax in (ax_err, ax_gone):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[1, :])
    ax.imshow(strip(frames, episodes, report["chunk"], strip_episodes))
    ax.set_title("imagined (upper) over recorded (lower) at each chunk's end, episode by episode")
    ax.axis("off")
    fig.tight_layout()
    with atomic_dir(out, WRITER, force=force) as tmp:
        (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        fig.savefig(tmp / "report.png", dpi=100)
    plt.close(fig)
    return Path(out)


def strip(frames: np.ndarray, episodes: Sequence[Episode], chunk: int, n: int) -> np.ndarray:
    """uint8 mosaic: per episode two rows (imagined, recorded) of the frames at t_c, c = 0..n
    chunks; a 2 px white gap between episodes."""
    bands = []
    for b, ep in enumerate(episodes[:n]):
        t = [min(chunk * c, len(ep)) for c in range((frames.shape[1] - 1) // chunk + 1)]
        bands.append(np.concatenate([np.concatenate([frames[b, i] for i in t], 1),
                                     np.concatenate([ep.frames[i] for i in t], 1)], 0))
        bands.append(np.full((2, *bands[-1].shape[1:]), 255, np.uint8))
    return np.concatenate(bands[:-1], 0)
