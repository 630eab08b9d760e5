"""Reward models: frames scored per second (random weights; the numbers are about speed)."""

from __future__ import annotations

import tempfile
import time

import torch

from wmrl.rewards.resnet import REAL_CONFIG, TINY_CONFIG, ResNetSuccessReward
from wmrl.rewards.topreward import TOPReward, save_tiny_qwen3vl


def _frames_per_s(reward, frames: torch.Tensor, tasks: list[str], repeats: int) -> float:
    reward(frames, tasks)  # build + warm up
    start = time.perf_counter()
    for _ in range(repeats):
        reward(frames, tasks)
    return repeats * frames.shape[0] * frames.shape[1] / (time.perf_counter() - start)


def run(envs: int = 8, chunk: int = 8, real_image: int = 256,
        repeats: tuple[int, int, int] = (5, 2, 3)) -> list[dict]:
    """Frames of ``envs`` x ``chunk`` per call; ``real_image``: ResNet-18's frame size;
    ``repeats``: timed calls for the tiny ResNet, ResNet-18 and TOPReward."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    tasks = ["put the bowl on the plate"] * envs
    results = []
    cases = [
        ("reward.resnet_tiny_frames_per_s", TINY_CONFIG, 64, repeats[0]),
        (f"reward.resnet18_{real_image}_frames_per_s", REAL_CONFIG, real_image, repeats[1]),
    ]
    for name, config, size, n in cases:
        frames = torch.randint(0, 256, (envs, chunk, size, size, 3), dtype=torch.uint8,
                               generator=g)
        reward = ResNetSuccessReward(config=config, device=device)
        results.append({"name": name, "value": _frames_per_s(reward, frames, tasks, n),
                        "unit": "frames/s", "device": device, "envs": envs, "chunk": chunk,
                        "image": size})
    with tempfile.TemporaryDirectory() as tmp:
        reward = TOPReward(str(save_tiny_qwen3vl(tmp)), device=device)
        frames = torch.randint(0, 256, (envs, chunk, 64, 64, 3), dtype=torch.uint8, generator=g)
        results.append({"name": "reward.topreward_tiny_frames_per_s",
                        "value": _frames_per_s(reward, frames, tasks, repeats[2]),
                        "unit": "frames/s", "device": device, "envs": envs, "chunk": chunk, "image": 64,
                        "window": reward.window})
    return results


if __name__ == "__main__":
    for row in run():
        print(row)
