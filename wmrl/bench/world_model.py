"""World-model env benchmark on the tiny config (CPU): chunk_step frames/s for B=32, the share of chunk_step time spent outside the model's
forward passes (VAE encode/decode, DiT, reward call), and the effect of the result-changing
``reuse_generated_latents`` switch on frames and reward scores."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from wmrl.envs.wan_env import WanWorldModelEnv

CONF = Path(__file__).resolve().parents[2] / "conf" / "env" / "wan_tiny.yaml"


class MeanBrightness:
    """Deterministic stand-in reward: mean pixel value / 255 per frame."""

    def __call__(self, frames: torch.Tensor, tasks: list[str]) -> torch.Tensor:
        return frames.float().mean(dim=(2, 3, 4)) / 255.0


def _rollout(num_envs: int, chunks: int, **overrides):
    cfg = OmegaConf.to_container(OmegaConf.load(CONF), resolve=False)
    cfg.pop("_target_")
    cfg["world_model"]["path"] = None
    cfg.update(num_envs=num_envs, reward=MeanBrightness(), success_threshold=2.0, **overrides)
    env = WanWorldModelEnv(**cfg)
    env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    acts = [torch.rand(num_envs, env.chunk, 7, generator=gen) * 2 - 1 for _ in range(chunks + 1)]
    env.chunk_step(acts[0])  # warm-up
    for k in env.timings:
        env.timings[k] = 0
    frames, scores = [], []
    t0 = time.perf_counter()
    for a in acts[1:]:
        obs, _, _, _, info = env.chunk_step(a)
        frames.append(obs["image"].cpu())
        scores.append(info["scores"].cpu())
    wall = time.perf_counter() - t0
    return env, wall, torch.stack(frames), torch.stack(scores)


def run(num_envs: int = 32, chunks: int = 3) -> list[dict]:
    """``chunks`` timed chunk steps of ``num_envs`` envs, after a warm-up one."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out: list[dict] = []
    results = {}
    for name, kw in (("default", {}), ("reuse_latents", {"reuse_generated_latents": True})):
        env, wall, frames, scores = _rollout(num_envs, chunks, **kw)
        t = env.timings
        outside = t["chunk_step"] - t["model"] - t["reward"]
        results[name] = (frames, scores)
        out.append({"name": f"world_model.chunk_step_frames_per_s.{name}",
                    "value": num_envs * env.chunk * chunks / wall, "unit": "frames/s",
                    "num_envs": num_envs, "image": env.height, "chunks": chunks,
                    "s_per_chunk_step": wall / chunks})
        out.append({"name": f"world_model.outside_model_share.{name}",
                    "value": outside / t["chunk_step"], "unit": "fraction",
                    "model_s": t["model"], "reward_s": t["reward"], "outside_s": outside})
    (ff, fs), (rf, rs) = results["default"], results["reuse_latents"]
    out.append({"name": "world_model.reuse_latents.frame_mean_abs_diff",
                "value": (rf.float() - ff.float()).abs().mean().item(), "unit": "uint8 levels",
                "per_chunk": (rf.float() - ff.float()).abs().mean(dim=(1, 2, 3, 4)).tolist()})
    out.append({"name": "world_model.reuse_latents.score_mean_abs_diff",
                "value": (rs - fs).abs().mean().item(), "unit": "score",
                "mean_score_default": fs.mean().item()})
    return out


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
