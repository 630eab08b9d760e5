"""``SimEvalCallback``: honest evaluation in the tabletop simulator during a fit
(``wmrl.pipeline.evaluate.evaluate_policy``: success_once on fixed initial states). It runs in
the trainer process (rank 0) on the trainer's own policy.
"""

from __future__ import annotations

import json
import os
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_only

from wmrl.interfaces import PolicyTrainer
from wmrl.pipeline.evaluate import evaluate_policy, save_gif, save_success_plot
from wmrl.sim.tabletop import TASK_NAMES


def world_model_success(pl_module: L.LightningModule, last_steps: int) -> float | None:
    """Mean ``rollout/success`` (the world model + reward's verdict on the policy's rollouts)
    over the module's last ``last_steps`` training steps; None without such history."""
    history = pl_module.history if isinstance(pl_module, PolicyTrainer) else []
    hist = [m["rollout/success"] for m in history if "rollout/success" in m]
    if last_steps <= 0 or not hist:
        return None
    return float(np.mean(hist[-last_steps:]))


class SimEvalCallback(L.Callback):
    """Evaluate ``pl_module.policy`` in the simulator at train start, every ``every_n_steps``
    optimizer steps, and at train end. Logs ``sim/success`` and ``sim/success_<task>`` to the
    trainer's logger(s), writes ``num_videos`` GIFs and ``success_vs_step.png`` under
    ``<out_dir>`` (default ``<trainer.default_root_dir>/sim_eval``) and, with a WandbLogger,
    logs them as ``wandb.Video`` / ``wandb.Image``; at train end ``history.jsonl`` and
    ``success_vs_step.png`` also go to the wandb run as one artifact (type ``sim_eval``).
    ``history`` keeps every result."""

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
        self._log_artifact(trainer)

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

    @rank_zero_only
    def _log_artifact(self, trainer: L.Trainer) -> list:
        """The final ``history.jsonl`` + ``success_vs_step.png`` as a wandb artifact
        ``sim_eval-<run id>`` (a new version per fit of that run); the artifacts logged."""
        from lightning.pytorch.loggers import WandbLogger

        out = self._out_dir(trainer)
        files = [p for p in (os.path.join(out, "history.jsonl"),
                             os.path.join(out, "success_vs_step.png")) if os.path.isfile(p)]
        logged = []
        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger) and files:
                import wandb

                art = wandb.Artifact(f"sim_eval-{lg.experiment.id}", type="sim_eval")
                for p in files:
                    art.add_file(p)
                lg.experiment.log_artifact(art)
                logged.append(art)
        return logged
