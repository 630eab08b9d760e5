"""Honest evaluation in the tabletop simulator: ``evaluate_policy`` and ``SimEvalCallback``.

Success is LIBERO's ``success_once`` (the privileged predicate holds at any step) on the fixed
initial states 0..n-1 of every task (``wmrl.sim.tabletop.initial_state``), with the policy
sampling at the eval temperature from a seeded generator: the same weights give the same
numbers. The callback runs in the trainer process (rank 0) on the trainer's own policy.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only

from wmrl.sim.rollout import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import TASK_NAMES, TabletopVecEnv, task_by_name


@dataclass
class EvalResult:
    success: dict[str, float]  # per task name
    overall: float
    episodes: int
    seconds: float
    videos: list[tuple[str, np.ndarray, bool]] = field(default_factory=list)  # task, frames, ok
    outcomes: dict[str, list[bool]] = field(default_factory=dict)  # per task, per episode

    def metrics(self, prefix: str = "sim") -> dict[str, float]:
        out = {f"{prefix}/success": self.overall}
        out.update({f"{prefix}/success_{k}": v for k, v in self.success.items()})
        return out


@torch.no_grad()
def evaluate_policy(policy, tasks: list[str] | tuple[str, ...] = TASK_NAMES,
                    episodes_per_task: int = 100, temperature: float = 1.0, seed: int = 0,
                    num_envs: int = 16, repeats: int = 1, num_videos: int = 0,
                    env: dict | None = None) -> EvalResult:
    """Roll ``policy`` out on states 0..episodes_per_task-1 of each task, each state
    ``repeats`` times in a row (repeats > 1 gives groups, as GRPO samples them).
    ``env``: TabletopEnv kwargs (image_size, max_episode_steps, eval_seed, ...)."""
    if episodes_per_task < 1 or repeats < 1:
        raise ValueError(f"episodes_per_task and repeats must be >= 1, got "
                         f"{episodes_per_task}, {repeats}")
    kw = dict(env or {})
    kw.pop("_target_", None)
    kw.setdefault("terminate_on_success", True)
    was_training = policy.training
    policy.eval()
    source = PolicyActionSource(policy, temperature=temperature, seed=seed)
    vec = TabletopVecEnv(num_envs, **kw)
    t0 = time.perf_counter()
    success, outcomes, videos = {}, {}, []
    try:
        for k, task in enumerate(tasks):
            name = task_by_name(task).name
            specs = [EpisodeSpec(name, state_id=i) for i in range(episodes_per_task)
                     for _ in range(repeats)]
            ok = []
            # a distinct seed stream per task, so adding a task leaves the others unchanged
            for j, ep in enumerate(rollout_episodes(vec, source, specs, seed=seed + 7919 * k)):
                ok.append(ep.success)
                if j < num_videos:
                    videos.append((name, ep.frames, ep.success))
            outcomes[name] = ok
            success[name] = float(np.mean(ok))
    finally:
        vec.close()
        policy.train(was_training)
    n = sum(len(v) for v in outcomes.values())
    overall = float(np.mean([o for v in outcomes.values() for o in v]))
    return EvalResult(success, overall, n, time.perf_counter() - t0, videos, outcomes)


def mixed_group_fraction(outcomes: list[bool], group_size: int) -> float:
    """Fraction of consecutive groups of ``group_size`` episodes with both outcomes."""
    o = np.asarray(outcomes, dtype=float).reshape(-1, group_size).mean(1)
    return float(np.mean((o > 0) & (o < 1)))


# ---- artifacts --------------------------------------------------------------------------
def save_gif(frames: np.ndarray, path: str, fps: int = 10, scale: int = 2) -> str:
    """uint8 [T, H, W, 3] -> animated GIF (Pillow), written atomically."""
    from PIL import Image

    imgs = [Image.fromarray(f).resize((f.shape[1] * scale, f.shape[0] * scale), Image.NEAREST)
            for f in np.asarray(frames, dtype=np.uint8)]
    tmp = path + ".tmp"
    imgs[0].save(tmp, format="GIF", save_all=True, append_images=imgs[1:],
                 duration=int(1000 / fps), loop=0)
    os.replace(tmp, path)
    return path


def save_success_plot(history: list[dict], path: str) -> str:
    """Simulator success (overall and per task) vs training step -> PNG, with the world
    model's own success (``wm/success``, its rollouts since the previous eval) beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.plot(steps, [h["sim/success"] for h in history], "k-o", label="overall", lw=2)
    for key in sorted(k for k in history[0] if k.startswith("sim/success_")):
        ax.plot(steps, [h.get(key, np.nan) for h in history], "--", marker=".",
                label=key.removeprefix("sim/success_"))
    if any("wm/success" in h for h in history):
        ax.plot(steps, [h.get("wm/success", np.nan) for h in history], ":", color="gray",
                marker="s", label="world model (its rollouts)")
    ax.set(xlabel="training step", ylabel="success", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def world_model_success(pl_module: L.LightningModule, last_steps: int) -> float | None:
    """Mean ``rollout/success`` (the world model + reward's verdict on the policy's rollouts)
    over the module's last ``last_steps`` training steps; None without such history."""
    hist = [m["rollout/success"] for m in getattr(pl_module, "history", [])
            if "rollout/success" in m]
    if last_steps <= 0 or not hist:
        return None
    return float(np.mean(hist[-last_steps:]))


class SimEvalCallback(L.Callback):
    """Evaluate ``pl_module.policy`` in the simulator at train start, every ``every_n_steps``
    optimizer steps, and at train end. Logs ``sim/success`` and ``sim/success_<task>`` to the
    trainer's logger(s), writes ``num_videos`` GIFs and ``success_vs_step.png`` under
    ``<out_dir>`` (default ``<trainer.default_root_dir>/sim_eval``) and, with a WandbLogger,
    logs them as ``wandb.Video`` / ``wandb.Image``. ``history`` keeps every result."""

    def __init__(self, every_n_steps: int = 10, episodes_per_task: int = 70,
                 tasks: list[str] | None = None, temperature: float = 1.0, seed: int = 0,
                 num_envs: int = 16, num_videos: int = 3, env: dict | None = None,
                 out_dir: str | None = None, at_start: bool = True, at_end: bool = True):
        if every_n_steps < 0:
            raise ValueError(f"SimEvalCallback.every_n_steps must be >= 0, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.eval_kwargs = dict(tasks=list(tasks or TASK_NAMES),
                                episodes_per_task=episodes_per_task, temperature=temperature,
                                seed=seed, num_envs=num_envs, num_videos=num_videos,
                                env=dict(env or {}))
        self.out_dir = out_dir
        self.at_start, self.at_end = at_start, at_end
        self.history: list[dict] = []
        self._last_step = -1

    # ---- hooks ------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.at_start:
            self._run(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0:
            self._run(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.at_end:
            self._run(trainer, pl_module)

    # ---- work ---------------------------------------------------------------------------
    @rank_zero_only
    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if step == self._last_step:  # e.g. the last periodic eval is also the end
            return
        self._last_step = step
        res = evaluate_policy(pl_module.policy, **self.eval_kwargs)
        row = {"step": step, **res.metrics(), "sim/eval_seconds": res.seconds}
        wm = world_model_success(pl_module, step - (self.history[-1]["step"] if self.history
                                                    else 0))
        if wm is not None:
            row["wm/success"] = wm
        self.history.append(row)
        out = self._out_dir(trainer)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "history.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        for lg in trainer.loggers:
            lg.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)
        paths = [save_gif(fr, os.path.join(out, f"step{step:06d}_{task}_{i}_"
                                                f"{'ok' if ok else 'fail'}.gif"))
                 for i, (task, fr, ok) in enumerate(res.videos)]
        plot = save_success_plot(self.history, os.path.join(out, "success_vs_step.png"))
        self._log_media(trainer, step, paths, plot)
        print(f"[sim eval] step {step}: success {res.overall:.3f} "
              + " ".join(f"{k} {v:.2f}" for k, v in res.success.items())
              + f" ({res.episodes} episodes, {res.seconds:.0f} s)"
              + ("" if wm is None else f" | world model's success since last eval {wm:.3f}"),
              flush=True)

    def _out_dir(self, trainer: L.Trainer) -> str:
        if self.out_dir:
            return self.out_dir
        return os.path.join(trainer.default_root_dir, "sim_eval")

    @staticmethod
    def _log_media(trainer: L.Trainer, step: int, videos: list[str], plot: str) -> None:
        from lightning.pytorch.loggers import WandbLogger

        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger):
                import wandb

                media = {"sim/success_vs_step": wandb.Image(plot)}
                if videos:
                    media["sim/videos"] = [wandb.Video(p, format="gif") for p in videos]
                lg.experiment.log({**media, "trainer/global_step": step})
