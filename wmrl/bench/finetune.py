"""World-model fine-tune (``WorldModelFinetune``) on CPU: seconds per optimizer step on a
fixed batch of clips (data loading excluded), split into the frozen VAE's encode, the
objective's forward (``FlowMatchObjective.loss``, WoVR's preset), backward and the AdamW step
(with ``zero_grad``); the full fine-tune beside LoRA at each of ``ranks`` (the fork's targets,
the action modules trained in full as ``train_action_modules`` does by default), their
trainable parameter counts, and the clip stream's throughput (``WorldModelClipData``'s train
loader over a synthetic LeRobot dataset, video decoding included).

The model is conf/train_world_model.yaml's (the tabletop's: 64x64 frames, a 2-layer 64-wide
DiT, random weights: the step's cost does not depend on them); clips are 13 frames (anchor,
4 context, 8 new) with 7-D actions, as the module trains on. The variants take their steps in
turn (full, r8, r32, full, ...) so that a slower stretch of a shared machine hits them alike;
the first ``warmup`` rounds are not timed, then each part's median over ``steps`` steps (the
step's median is of the per-step sums). The step is ``training_step``'s body inlined (the
split needs it) without Lightning's loop around it.

The clip stream: a dataset written at ``image`` (and one at twice that, read with
``data.size`` resizing it), decoded as training reads it (one episode at a time, clips through
the shuffle buffer, default collate into batches); timed in the steady state, after the first
batch (which waits for the buffer to fill)."""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from wmrl.bench.lerobot import FPS, synthetic_episode
from wmrl.finetune.world_model_clips import WorldModelClipData
from wmrl.finetune.world_model_module import WorldModelFinetune
from wmrl.lerobot.writer import write_lerobot
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES

CONF = Path(__file__).resolve().parents[2] / "conf" / "train_world_model.yaml"
PARTS = ("encode", "forward", "backward", "optimizer")


def model_config() -> dict:
    """conf/train_world_model.yaml's model, the latent statistics' nulls as zeros / ones (as
    scripts/train_world_model.py sets them before it has data statistics)."""
    m = OmegaConf.to_container(OmegaConf.load(CONF).model, resolve=True)
    z = int(m["vae"]["z_dim"])
    m["vae"]["latents_mean"] = m["vae"].get("latents_mean") or [0.0] * z
    m["vae"]["latents_std"] = m["vae"].get("latents_std") or [1.0] * z
    return m


def _clip_data(root: Path, batch: int, size: int | None) -> WorldModelClipData:
    return WorldModelClipData("lerobot", [str(root)], batch_size=batch, val_episodes=1,
                              size=None if size is None else (size, size), seed=0)


def _stream(data: WorldModelClipData, batches: int) -> tuple[float, dict]:
    """Clips/s of the train loader over ``batches`` batches after the first, and the first."""
    it = iter(data.train_dataloader())
    first = next(it)
    n = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        n += len(next(it)["frames"])
    return n / (time.perf_counter() - t0), first


class _Variant:
    """One module, its optimizer (as ``configure_optimizers`` makes it) and its timings."""

    def __init__(self, name: str, model: dict, lora: dict | None):
        self.name = name
        self.module = WorldModelFinetune(model, lora=lora)
        self.module.configure_model()
        self.module.train()
        self.module.model.vae.eval()
        trainable = self.module.trainable_parameters()
        hp = self.module.hparams
        self.opt = torch.optim.AdamW(list(trainable.values()), lr=hp.lr,
                                     betas=tuple(hp.betas), weight_decay=hp.weight_decay)
        self.params = {
            "trainable": sum(p.numel() for p in trainable.values()),
            "adapters": sum(p.numel() for n, p in trainable.items() if "lora_" in n),
            "action_modules": sum(p.numel() for n, p in trainable.items()
                                  if n.startswith("model.action.")),
            "total": sum(p.numel() for p in self.module.parameters()),
        }
        self.times: dict[str, list[float]] = {k: [] for k in (*PARTS, "step")}

    def step(self, batch: dict, k: int, timed: bool) -> float:
        m = self.module
        t0 = time.perf_counter()
        latents = m._latents(batch["frames"])
        t1 = time.perf_counter()
        n_cond = m.model.latent_frames(CONDITION_FRAMES)
        loss = m.objective.loss(m.model, latents, batch["actions"], n_cond, m._generator(k, 0))
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if timed:
            for part, s in zip((*PARTS, "step"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                self.times[part].append(s)
        return loss.item()

    def median(self, part: str) -> float:
        return statistics.median(self.times[part])


def run(batch: int = 4, steps: int = 40, warmup: int = 1, ranks: tuple = (8, 32),
        image: int = 64, threads: int = 1, episodes: int = 8, length: int = 41,
        stream_passes: int = 3) -> list[dict]:
    """``steps`` timed steps of ``batch`` clips of ``image`` x ``image`` per variant (full,
    LoRA at each of ``ranks``) after ``warmup``; the clip stream over ``episodes`` synthetic
    episodes of ``length`` frames (one held out), ``stream_passes`` passes of the rest."""
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # conf/train_world_model.yaml's threads: 1
    try:
        return _run(batch, steps, warmup, tuple(ranks), image, threads, episodes, length,
                    stream_passes)
    finally:
        torch.set_num_threads(saved_threads)


def _run(batch, steps, warmup, ranks, image, threads, episodes, length, stream_passes):
    context = {"batch": batch, "frames": CONDITION_FRAMES + CHUNK, "image": image,
               "model": "conf/train_world_model.yaml", "threads": threads,
               "cpus": os.cpu_count()}
    out: list[dict] = []
    clips_per_pass = (episodes - 1) * math.ceil((length - 1) / CHUNK)
    stream_batches = max(1, stream_passes * clips_per_pass // batch)
    stream_ctx = {"episodes": episodes, "length": length, "batch": batch, "image": image,
                  "batches_timed": stream_batches, "clips_per_pass": clips_per_pass,
                  "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        fixed = None
        for tag, written, size in (("native", image, None), ("resized", 2 * image, image)):
            root = Path(tmp) / tag
            write_lerobot(root, (synthetic_episode(i, length, written) for i in range(episodes)), FPS)
            clips_per_s, first = _stream(_clip_data(root, batch, size), stream_batches)
            fixed = fixed if fixed is not None else first
            name = f"finetune.clip_stream_clips_per_s.{tag}_{image}" if size is None else \
                f"finetune.clip_stream_clips_per_s.resized_{written}_to_{image}"
            out.append({"name": name, "value": float(clips_per_s), "unit": "clips/s",
                        "written": written, **stream_ctx})

    assert fixed["frames"].shape == (batch, CONDITION_FRAMES + CHUNK, image, image, 3), \
        fixed["frames"].shape
    model = model_config()
    variants = [_Variant("full", model, None)]
    variants += [_Variant(f"lora_r{r}", model, {"rank": r}) for r in ranks]
    for k in range(warmup + steps):
        for v in variants:  # in turn: a slow stretch of the machine hits every variant
            loss = v.step(fixed, k, timed=k >= warmup)
            if not math.isfinite(loss):
                raise RuntimeError(f"{v.name}: loss {loss} at step {k}")

    full = variants[0]
    for v in variants:
        ctx = {"variant": v.name, "steps": steps, "warmup": warmup, **context}
        out.append({"name": f"finetune.step_s.{v.name}", "value": v.median("step"),
                    "unit": "s", "clips_per_s": batch / v.median("step"),
                    **{f"{p}_s": v.median(p) for p in PARTS}, **ctx})
        for p in PARTS:
            out.append({"name": f"finetune.{p}_s.{v.name}", "value": v.median(p), "unit": "s",
                        "share_of_step": v.median(p) / v.median("step"), **ctx})
        out.append({"name": f"finetune.trainable_params.{v.name}",
                    "value": float(v.params["trainable"]), "unit": "params",
                    "adapter_params": v.params["adapters"],
                    "action_module_params": v.params["action_modules"],
                    "total_params": v.params["total"], "variant": v.name})
        if v is not full:
            out.append({"name": f"finetune.step_time_ratio.{v.name}_vs_full",
                        "value": v.median("step") / full.median("step"), "unit": "ratio",
                        **ctx})
            # the encode is the same frozen VAE pass for both: the ratio of the rest
            rest = {x: sum(x.median(p) for p in PARTS[1:]) for x in (v, full)}
            out.append({"name": f"finetune.dit_time_ratio.{v.name}_vs_full",
                        "value": rest[v] / rest[full], "unit": "ratio",
                        "what": "forward + backward + optimizer, encode left out", **ctx})
    stream = out[0]["value"]
    out.append({"name": "finetune.clip_stream_headroom", "value": stream * full.median("step")
                / batch, "unit": "ratio",
                "what": "native clip stream clips/s over the clips/s the full fine-tune takes",
                **context})
    return out


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
