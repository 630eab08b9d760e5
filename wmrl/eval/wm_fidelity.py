"""How faithful a world model is over a whole episode (``scripts/wm_report.py``).

Each recorded episode (a trajectory dataset of ``scripts/collect.py`` or a LeRobot dataset) is
replayed open loop through ``WanWorldModelEnv`` (``wmrl.finetune.reward_data.imagined_replays``):
the env starts from the episode's first frame and is fed the recorded actions chunk by chunk;
after the first chunk its context is its own frames, exactly as in a fit's episode. Chunks past
an episode's end are hold actions; every episode is scored at frame t_c = min(CHUNK * c, T) of
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
  episodes whose recorded frame shows the block where the imagined one has no pixel of it,
  also split at each episode's recorded first success s (the first frame its success label
  holds): ``vanished_pre_success`` over the episodes with t_c < s (or no success),
  ``vanished_post_success`` over those with t_c >= s;
* with the privileged state (a trajectory dataset's ``Episode.states`` and the camera it was
  rendered with, ``wmrl.sim.camera``): each block's centre projected to the image, p_t;
  ``state_median_px`` / ``state_mean_px`` = ||c(x̂_t) - p_t|| over the episodes where the
  imagined block is present, and ``recorded_state_*_px`` = ||c(x_t) - p_t|| over those where the
  recorded one is (how far the colour rule itself is from the state: a held block is partly
  hidden by the fingers);
* ``merged``: over the episodes whose recorded frame shows both blocks with centres at least
  MERGE_PX apart, the fraction whose imagined frame shows both closer than MERGE_PX / 2, or
  only one of them with at least as many pixels as its recorded blob plus half the missing
  one's (the two drawn as one blob of one colour);
* with a reward (a ``scripts/train_reward.py`` checkpoint dir): per episode, success = max_t
  p(x_t) >= threshold over frames 1..T, imagined against recorded (the reward's verdict on the
  simulator's frames is the truth here): precision tp / (tp + fp), recall tp / (tp + fn),
  balanced accuracy (TPR + TNR) / 2 (``success_confusion``).

``fidelity_report`` returns the report (JSON-ready) and the frames for the figure;
``write_report`` writes ``report.json`` and ``report.png`` into one folder, whole or not at all.
MuJoCo is loaded only to read a trajectory dataset's camera (``run_report``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from wmrl.errors import ConfigError
from wmrl.finetune.image_metrics import psnr, ssim, u8_video_to_unit
from wmrl.finetune.reward_data import imagined_replays
from wmrl.finetune.reward_on_imagination import load_reward, replay_scores
from wmrl.finetune.world_model import success_confusion
from wmrl.io.atomic import atomic_dir, check_output_dir
from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.sim.camera import PinholeCamera, block_pixels, tabletop_camera
from wmrl.sim.dataset import Episode, TrajectoryDataset
from wmrl.sim.tasks import BLOCKS, CAMERAS, STATE_DIM
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.clip_layout import CHUNK
from wmrl.world_model.files import CONFIG_FILES, is_world_model_dir

WRITER = "wm_report"
COLOUR_MARGIN = 60  # a block's pixel: its channel exceeds both others by more than this
CHANNEL = {"red": 0, "green": 1, "blue": 2}
# two blocks merged (module doc): recorded >= MERGE_PX apart, imagined < MERGE_PX / 2; at 64 px
# (front_close) a block is ~8 px wide, so 10 px apart leaves a gap and 5 px overlaps them
MERGE_PX = 10.0


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
def colour_mask(frames: np.ndarray, colour: str) -> np.ndarray:
    """bool [..., H, W]: the pixels of ``colour`` (its channel - max(other two) >
    COLOUR_MARGIN) in uint8 frames [..., H, W, 3]."""
    f = frames.astype(np.int16)
    k = CHANNEL[colour]
    return (f[..., k] - np.delete(f, k, axis=-1).max(-1)) > COLOUR_MARGIN


def block_centres(frames: np.ndarray, colour: str) -> tuple[np.ndarray, np.ndarray]:
    """(centre float [..., 2] as (row, col), present bool [...]) of the pixels of ``colour``
    (``colour_mask``) in uint8 frames [..., H, W, 3]; the centre is NaN where no pixel has
    the colour."""
    mask = colour_mask(frames, colour)
    count = mask.sum((-2, -1))
    rows = np.arange(mask.shape[-2])[:, None]
    cols = np.arange(mask.shape[-1])[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = np.stack([(mask * rows).sum((-2, -1)) / count,
                           (mask * cols).sum((-2, -1)) / count], -1)
    return centre, count > 0


def _median_mean(err: np.ndarray) -> tuple[float | None, float | None]:
    """(median, mean) of the finite errors (a point behind the camera projects to NaN)."""
    err = err[np.isfinite(err)]
    return (float(np.median(err)), float(err.mean())) if err.size else (None, None)


def _share(hit: np.ndarray, of: np.ndarray) -> float | None:
    return float((hit & of).sum() / of.sum()) if of.any() else None


def block_errors(imagined: np.ndarray, recorded: np.ndarray, first: np.ndarray,
                 colour: str, state_px: np.ndarray | None = None,
                 post_success: np.ndarray | None = None) -> dict:
    """A block's centre errors and vanishing over a batch of frames [B, H, W, 3] (see the
    module doc): ``state_px`` [B, 2] its projected privileged position (None: no state
    figures), ``post_success`` bool [B] t_c >= the episode's recorded first success (None:
    no episode has succeeded); None (JSON null) for a figure with no episode to average."""
    ci, pi = block_centres(imagined, colour)
    cr, pr = block_centres(recorded, colour)
    cf, pf = block_centres(first, colour)
    post = np.zeros(len(pr), bool) if post_success is None else np.asarray(post_success, bool)
    pre_present, post_present = pr & ~post, pr & post
    out = dict(zip(("median_px", "mean_px"),
                   _median_mean(np.linalg.norm(ci - cr, axis=-1)[pi & pr])))
    out["copy_first_median_px"] = _median_mean(np.linalg.norm(cf - cr, axis=-1)[pf & pr])[0]
    out["vanished"] = _share(~pi, pr)
    out["vanished_pre_success"] = _share(~pi, pre_present)
    out["vanished_post_success"] = _share(~pi, post_present)
    out["recorded_present"] = int(pr.sum())
    out["present_pre_success"] = int(pre_present.sum())
    out["present_post_success"] = int(post_present.sum())
    state = (None, None) * 2
    if state_px is not None:
        state = (_median_mean(np.linalg.norm(ci - state_px, axis=-1)[pi])
                 + _median_mean(np.linalg.norm(cr - state_px, axis=-1)[pr]))
    out.update(zip(("state_median_px", "state_mean_px", "recorded_state_median_px",
                    "recorded_state_mean_px"), state))
    return out


def merged_share(imagined: np.ndarray, recorded: np.ndarray) -> tuple[float | None, int]:
    """(share of merged pairs, number of episodes whose recorded frame shows the two blocks at
    least MERGE_PX apart) over frames [B, H, W, 3]: the module doc's definition."""
    a, b = BLOCKS
    img = {k: block_centres(imagined, k)[0] for k in BLOCKS}
    rec = {k: block_centres(recorded, k)[0] for k in BLOCKS}
    n_img = {k: colour_mask(imagined, k).sum((-2, -1)) for k in BLOCKS}
    n_rec = {k: colour_mask(recorded, k).sum((-2, -1)) for k in BLOCKS}
    with np.errstate(invalid="ignore"):
        apart = np.linalg.norm(rec[a] - rec[b], axis=-1) >= MERGE_PX  # NaN (absent): False
        close = np.linalg.norm(img[a] - img[b], axis=-1) < MERGE_PX / 2
    one_blob = np.zeros(len(apart), bool)
    for kept, lost in ((a, b), (b, a)):
        one_blob |= ((n_img[lost] == 0) & (n_img[kept] > 0)
                     & (n_img[kept] >= n_rec[kept] + n_rec[lost] / 2))
    return _share(close | one_blob, apart), int(apart.sum())


def image_scores(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean PSNR dB, mean SSIM) of uint8 frames x against y [B, H, W, 3]."""
    a, b = u8_video_to_unit(torch.from_numpy(x)), u8_video_to_unit(torch.from_numpy(y))
    return float(psnr(a, b).mean()), float(ssim(a, b).mean())


def first_success(episode: Episode) -> int | None:
    """The first frame whose recorded success label holds (frame t: after t actions), or None."""
    hits = np.flatnonzero(episode.success_labels)
    return int(hits[0]) if hits.size else None


def chunk_row(c: int, imagined: np.ndarray, episodes: Sequence[Episode],
              chunk: int = CHUNK, pixels: Sequence[np.ndarray] | None = None) -> dict:
    """Chunk ``c``'s figures: imagined [B, F, H, W, 3] (frame 0 the first frame) against each
    episode's recorded frame at t_c = min(chunk * c, T), and the two baselines; ``pixels``:
    per episode its blocks' projected positions [T + 1, len(BLOCKS), 2] (None: no state)."""
    t = [min(chunk * c, len(ep)) for ep in episodes]
    prev = [min(chunk * (c - 1), len(ep)) for ep in episodes]
    rec = np.stack([ep.frames[i] for ep, i in zip(episodes, t)])
    img = np.stack([imagined[b, i] for b, i in enumerate(t)])
    first = np.stack([ep.frames[0] for ep in episodes])
    last_true = np.stack([ep.frames[i] for ep, i in zip(episodes, prev)])
    success = [first_success(ep) for ep in episodes]
    post = np.array([s is not None and i >= s for s, i in zip(success, t)])
    state = None if pixels is None else np.stack([px[i] for px, i in zip(pixels, t)])
    row = {"chunk": c, "frame": chunk * c}
    row["psnr"], row["ssim"] = image_scores(img, rec)
    row["copy_first_psnr"], row["copy_first_ssim"] = image_scores(first, rec)
    row["copy_last_true_psnr"], row["copy_last_true_ssim"] = image_scores(last_true, rec)
    row["blocks"] = {b: block_errors(img, rec, first, b, None if state is None else state[:, k],
                                     post) for k, b in enumerate(BLOCKS)}
    row["merged"], row["merge_candidates"] = merged_share(img, rec)
    return row


def reward_verdicts(imagined_scores: Sequence[np.ndarray], recorded_scores: Sequence[np.ndarray],
                    threshold: float) -> dict:
    """Imagined vs recorded success per episode by the reward (see the module doc): one
    p(success) array [T] per episode each, of frames 1..T."""
    wm = np.array([s.max() >= threshold for s in imagined_scores])
    rec = np.array([s.max() >= threshold for s in recorded_scores])
    out = success_confusion(wm, rec)
    out["precision"] = out["tp"] / max(out["tp"] + out["fp"], 1)
    out["recall"] = out["tp"] / max(out["tp"] + out["fn"], 1)
    out["recorded_success"] = float(rec.mean())
    out["threshold"] = float(threshold)
    return out


# ---------------------------------------------------------------------------- the replay
def fidelity_report(model, episodes: Sequence[Episode], reward: Callable | None = None,
                    success_threshold: float = 0.99, num_inference_steps: int = 5,
                    seed: int = 0, batch_size: int = 64, chunk: int = CHUNK,
                    log: Callable[[str], None] = print,
                    camera: PinholeCamera | None = None,
                    context_noise_sigma: float = 0.0) -> tuple[dict, np.ndarray]:
    """(report, imagined frames [B, F, H, W, 3], frame 0 the first frame, F = 1 + chunk * n)
    of ``episodes`` replayed through ``model`` ``batch_size`` at a time (``imagined_replays``:
    batch i's noise seeded with ``seed`` + i); one printed line per chunk. ``camera``: the
    one the episodes were rendered with, for the state figures (episodes with ``states``).
    ``context_noise_sigma``: the env's noise on the condition latents (0: none)."""
    if not episodes:
        raise ValueError("no episodes to replay: the dataset is empty")
    if chunk != CHUNK:
        raise ValueError(f"chunk={chunk}: the replay steps the world model's own chunk, {CHUNK}")
    if camera is not None and any(ep.states is None for ep in episodes):
        raise ValueError("a camera is given but some episodes hold no privileged states")
    t0 = time.perf_counter()
    videos = imagined_replays(model, episodes, num_inference_steps, batch_size, seed,
                              context_noise_sigma)
    width = chunk * max(math.ceil(len(ep) / chunk) for ep in episodes)
    frames = np.stack([np.concatenate([ep.frames[:1], _pad(v, width)])
                       for ep, v in zip(episodes, videos)])
    pixels = None if camera is None else [block_pixels(ep.states, camera) for ep in episodes]
    rows = []
    for c in range(1, width // chunk + 1):
        rows.append(chunk_row(c, frames, episodes, chunk, pixels))
        log(chunk_line(rows[-1]))
    report = {"n_episodes": len(episodes), "n_chunks": len(rows), "chunk": chunk,
              "num_inference_steps": num_inference_steps, "seed": seed,
              "context_noise_sigma": context_noise_sigma,
              "batch_size": batch_size, "image_size": list(episodes[0].frames.shape[1:3]),
              "state_figures": camera is not None, "chunks": rows,
              "first_success_step": [first_success(ep) for ep in episodes], "reward": None}
    if reward is not None:
        tasks = [ep.task for ep in episodes]
        imagined = [s.numpy() for s in replay_scores(reward, videos, tasks)]
        recorded = [s.numpy()[1:] for s in replay_scores(reward, [ep.frames for ep in episodes],
                                                          tasks)]
        report["reward"] = reward_verdicts(imagined, recorded, success_threshold)
    report["seconds"] = time.perf_counter() - t0
    return report, frames


def chunk_line(row: dict) -> str:
    """The printed line of a chunk's figures (blocks the recorded frames never show left out)."""
    blocks = []
    for b, v in row["blocks"].items():
        if not v["recorded_present"]:
            continue
        text = (f"{b} {_num(v['median_px']):.1f}/{_num(v['mean_px']):.1f}px gone "
                f"{_pct(v['vanished'])} (pre-success {_pct(v['vanished_pre_success'])}, post "
                f"{_pct(v['vanished_post_success'])})")
        if v["recorded_state_median_px"] is not None:
            text += (f" vs state {_num(v['state_median_px']):.1f}/{_num(v['state_mean_px']):.1f}"
                     f"px (recorded {v['recorded_state_median_px']:.1f}/"
                     f"{v['recorded_state_mean_px']:.1f})")
        blocks.append(text)
    return (f"chunk {row['chunk']} (frame {row['frame']}): PSNR {row['psnr']:.2f} dB (copy first "
            f"{row['copy_first_psnr']:.2f}, copy last true {row['copy_last_true_psnr']:.2f})  SSIM "
            f"{row['ssim']:.3f} ({row['copy_first_ssim']:.3f}, {row['copy_last_true_ssim']:.3f})  "
            + "  ".join(blocks) + f"  merged {_pct(row['merged'])}")


def _num(v: float | None) -> float:
    return float("nan") if v is None else v


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _pad(x: np.ndarray, length: int) -> np.ndarray:
    """Pad axis 0 to ``length`` with its last entry (a shorter episode's hold)."""
    if len(x) == length:
        return x
    return np.concatenate([x, np.repeat(x[-1:], length - len(x), 0)])


# ---------------------------------------------------------------------------- the command
def run_report(world_model: str | Path, episodes: str | Path, out: str | Path,
               reward: str | Path | None = None, max_episodes: int | None = None,
               seed: int = 0, num_inference_steps: int = 5, success_threshold: float = 0.99,
               force: bool = False, device: str = "cpu",
               log: Callable[[str], None] = print, context_noise_sigma: float = 0.0) -> dict:
    """``scripts/wm_report.py``: ``--out`` checked before anything loads, then the world model
    (``save_pretrained``'s folder) and the reward on ``device``, the episodes (and the camera
    they were rendered with), the replay and the outputs."""
    check_output_dir(out, WRITER, force=force, key="--out")
    if context_noise_sigma < 0:
        raise ConfigError(f"--context-noise={context_noise_sigma} must be >= 0")
    try:
        kind = torch.device(device).type
    except RuntimeError as err:
        raise ConfigError(f"--device={device}: not a torch device ({err}); use cpu or cuda") from err
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device={device}: no CUDA device here; use --device cpu")
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
    model = ActionWanModel.from_pretrained(world_model).to(device)
    eps = load_episodes(episodes, max_episodes)
    score = None if reward is None else load_reward(str(reward))[0].to(device)
    camera = recorded_camera(episodes, eps, log)
    report, frames = fidelity_report(model, eps, score, success_threshold, num_inference_steps,
                                     seed, log=log, camera=camera,
                                     context_noise_sigma=context_noise_sigma)
    report.update(world_model=str(world_model), episodes=str(episodes),
                  reward_checkpoint=None if reward is None else str(reward), device=device,
                  camera=None if camera is None else recorded_camera_name(episodes))
    write_report(out, report, frames, eps, force=force)
    return report


def recorded_camera_name(path: str | Path) -> str | None:
    """A trajectory dataset's tabletop camera (meta.json ``env.camera``, ``tasks.CAMERAS``)
    when it records the privileged states; None for a LeRobot dataset or any other."""
    meta_path = Path(path) / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    name = (meta.get("env") or {}).get("camera")
    return name if meta.get("state_dim") == STATE_DIM and name in CAMERAS else None


def recorded_camera(path: str | Path, episodes: Sequence[Episode],
                    log: Callable[[str], None] = print) -> PinholeCamera | None:
    """The camera ``episodes`` (of the dataset at ``path``) were rendered with, read from the
    tabletop scene (MuJoCo loaded only here), or None (a line says why: no state figures)."""
    name = recorded_camera_name(path)
    if name is None:
        log(f"{path}: no tabletop camera and privileged states in meta.json (env.camera, "
            "state_dim): no block positions from the state")
        return None
    return tabletop_camera(name, episodes[0].frames.shape[1:3])


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
        if report.get("state_figures"):
            ax_err.plot(c, [_num(r["blocks"][b]["state_median_px"]) for r in rows], "-.x",
                        color=b, label=f"{b} vs state (median)")
        ax_gone.plot(c, [100 * _num(r["blocks"][b]["vanished"]) for r in rows], "-o", color=b,
                     label=f"{b} vanished")
        ax_gone.plot(c, [100 * _num(r["blocks"][b]["vanished_post_success"]) for r in rows], ":",
                     color=b, label=f"{b} vanished after success")
    ax_gone.plot(c, [100 * _num(r["merged"]) for r in rows], "-s", color="black",
                 label="blocks merged")
    ax_err.set(xlabel="chunk", ylabel="block centre error (px)")
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_gone.set(xlabel="chunk", ylabel="vanished / merged (% of episodes)")
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
