"""LeRobot datasets: frames/s of ``LeRobotDataset(...).episodes()`` decoding a whole synthetic
dataset, v3.0 (episodes back to back in one mp4) beside v2.1 (an mp4 per episode), at the
written size and resized (PIL bicubic, antialiased), and of ``write_lerobot`` writing it
(encoding, and the per-episode stats: on 2 CPU cores they take more time than the encoder).

The frames are a smooth scene (a gradient per episode, a fixed texture, a square crossing the
image), not noise, which no camera sees and which costs the codec far more; h264 at LeRobot's
GOP 2 and CRF 30, the writer's defaults. Decoding is timed best of ``repeats``, each a fresh
reader over every episode (parquet rows too: what a consumer of the dataset waits for)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.lerobot.writer import write_lerobot

FPS = 10


def synthetic_episode(i: int, length: int, size: int) -> tuple:
    """(frames, actions, task, success, state) of synthetic episode ``i``."""
    rng = np.random.default_rng(i)
    ramp = np.linspace(0, 1, size, dtype=np.float32)
    base = np.empty((size, size, 3), np.float32)
    base[..., 0] = 60 + 120 * ramp[None, :]
    base[..., 1] = 60 + 120 * ramp[:, None]
    base[..., 2] = 40 + 20 * (i % 5)
    base += rng.normal(0, 8, (size, size, 1))  # a fixed texture, as a table top has
    frames = np.repeat(np.clip(base, 0, 255).astype(np.uint8)[None], length, axis=0)
    side = max(2, size // 8)
    for t in range(length):
        x = (t * (size - side)) // max(1, length - 1)
        frames[t, size // 2 - side // 2:size // 2 + side // 2, x:x + side] = (220, 30, 30)
    actions = rng.normal(size=(length, 7)).astype(np.float32)
    success = np.arange(length) >= length - 2
    state = rng.normal(size=(length, 8)).astype(np.float32)
    return frames, actions, "put the red block on the plate", success, state


def _decode_s(root: Path, size: tuple[int, int] | None, repeats: int) -> tuple[float, int]:
    """Best seconds to read every episode, and the frames read."""
    best, frames = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        frames = sum(len(ep.frames) for ep in LeRobotDataset(root, size=size).episodes())
        best = min(best, time.perf_counter() - t0)
    return best, frames


def run(episodes: int = 8, length: int = 64, size: int = 128, resize: int = 64,
        repeats: int = 3) -> list[dict]:
    """``episodes`` x ``length`` frames of ``size`` x ``size``, decoded in both versions and,
    for v3.0, resized to ``resize``."""
    total = episodes * length
    context = {"episodes": episodes, "length": length, "image": size, "codec": "h264",
               "cpus": os.cpu_count()}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in ("v3.0", "v2.1"):
            tag = version.replace(".", "_")
            root = Path(tmp) / tag
            t0 = time.perf_counter()
            write_lerobot(root, (synthetic_episode(i, length, size) for i in range(episodes)), FPS,
                          version=version)
            write_s = time.perf_counter() - t0
            mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2 ** 20
            seconds, frames = _decode_s(root, None, repeats)
            assert frames == total, (frames, total)
            out.append({"name": f"lerobot.decode_frames_per_s.{tag}", "value": total / seconds,
                        "unit": "frames/s", "version": version, "dataset_mb": round(mb, 2),
                        **context})
            if version == "v3.0":
                seconds, _ = _decode_s(root, (resize, resize), repeats)
                out.append({"name": f"lerobot.decode_resize_{resize}_frames_per_s.{tag}",
                            "value": total / seconds, "unit": "frames/s", "version": version,
                            "resize": resize, **context})
            out.append({"name": f"lerobot.write_frames_per_s.{tag}", "value": total / write_s,
                        "unit": "frames/s", "version": version, **context})
    return out
