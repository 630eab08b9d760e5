"""``SimEvalCallback``: honest evaluation in the tabletop simulator during a fit
(``wmrl.eval.evaluate.evaluate_policy``: success_once on fixed initial states). It runs in
the trainer process (rank 0) on the trainer's own policy.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.utilities import rank_zero_only

from wmrl.build import to_container
from wmrl.eval.evaluate import EvalResult, evaluate_policy, save_success_plot
from wmrl.eval.side_by_side import (
    WORLD_MODEL_ENV,
    imagined_beside_eval,
    paired_gap,
    replay_in_simulator,
)
from wmrl.interfaces import PolicyTrainer
from wmrl.io.atomic import atomic_path
from wmrl.io.videos import save_gif, side_by_side_video
from wmrl.sim.tasks import TASK_NAMES


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
    optimizer steps, and at train end. Logs ``sim/success`` (with its 95% Wilson interval,
    ``sim/ci95_low`` / ``sim/ci95_high``) and ``sim/success_<task>`` to the
    trainer's logger(s), writes ``num_videos`` GIFs and ``success_vs_step.png`` under
    ``<out_dir>`` (default ``<trainer.default_root_dir>/sim_eval``) and, with a WandbLogger,
    logs them as ``wandb.Video`` / ``wandb.Image``; at train end ``history.jsonl`` and
    ``success_vs_step.png`` also go to the wandb run as one artifact (type ``sim_eval``).
    ``history`` keeps every result.

    ``unseen_eval_seeds``: {name: eval_seed} of further scene sets (the same number of scenes,
    drawn with another seed, so the world model never started from them), scored at train
    start and end only and logged as ``sim_<name>/success``: whether a gain carries over to
    scenes the policy never trained on.

    ``side_by_side`` ({scenes, env, chunk, max_episode_steps}): at every eval the same policy
    also runs in the world model (``env``) from the first frame of the eval's first ``scenes``
    scenes of ``tasks[0]`` (all of them if it has fewer), paired with the simulator's verdicts
    on those scenes in this eval (``wmrl.eval.side_by_side.paired_gap``): ``sim/paired_wm_success``,
    ``sim/paired_sim_success``, ``sim/paired_gap`` (wm - sim) with its 95% interval
    ``sim/paired_gap_ci95_low`` / ``_high``, ``sim/paired_agreement``, ``sim/paired_scenes``;
    and the imagined episodes' own actions replayed in the simulator from the same scenes
    (``replay_in_simulator``: the truth about what the world model judged):
    ``sim/paired_replay_success``, ``_replay_agreement``, ``_replay_precision`` (the share of
    imagined successes whose actions succeed in the simulator)."""

    def __init__(self, every_n_steps: int = 10, episodes_per_task: int = 70,
                 tasks: list[str] | None = None, temperature: float = 1.0, seed: int = 0,
                 num_envs: int = 16, num_videos: int = 3, env: dict | None = None,
                 out_dir: str | None = None, at_start: bool = True, at_end: bool = True,
                 unseen_eval_seeds: dict[str, int] | None = None,
                 side_by_side: dict | None = None):
        if every_n_steps < 0:
            raise ValueError(f"SimEvalCallback.every_n_steps must be >= 0, got {every_n_steps}")
        self.unseen_eval_seeds = {str(k): int(v) for k, v in (unseen_eval_seeds or {}).items()}
        train_seed = int((env or {}).get("eval_seed", 0))
        for name, s in self.unseen_eval_seeds.items():
            if s == train_seed:
                raise ValueError(f"callbacks.sim_eval.unseen_eval_seeds.{name}={s} is the "
                                 "training scenes' eval_seed: pick another seed")
        self.every_n_steps = every_n_steps
        self.eval_kwargs = dict(tasks=list(tasks or TASK_NAMES),
                                episodes_per_task=episodes_per_task, temperature=temperature,
                                seed=seed, num_envs=num_envs, num_videos=num_videos,
                                env=dict(env or {}))
        self.out_dir = out_dir
        self.at_start, self.at_end = at_start, at_end
        sbs = to_container(side_by_side) if side_by_side else {}
        # imagined | real needs a world model; the simulator-oracle run has none
        self.side_by_side = sbs if int(sbs.get("scenes") or 0) > 0 and (
            sbs.get("env") or {}).get("_target_") == WORLD_MODEL_ENV else None
        if self.side_by_side:  # paired with the eval's own scenes: at most all of them
            self.side_by_side["scenes"] = min(int(sbs["scenes"]), episodes_per_task)
        self.history: list[dict] = []
        self._last_step = -1

    # ---- state: the eval history survives a resume (history.jsonl is rewritten from it) --
    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "last_step": self._last_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = list(state_dict.get("history", []))
        self._last_step = int(state_dict.get("last_step", -1))

    # ---- hooks ------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.start_due(trainer.global_step):
            self._run(trainer, pl_module, unseen=True)

    def start_due(self, step: int) -> bool:
        """The eval at the start: the base policy's (step 0), or a resumed run's first when its
        checkpoint holds none; a run resumed after its evals began goes on without one (the
        resumed weights are the checkpoint's, already scored or due at the next interval)."""
        return self.at_start and (step == 0 or not self.history)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.every_n_steps and step > 0 and step % self.every_n_steps == 0:
            self._run(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.at_end:
            self._run(trainer, pl_module, unseen=True)
        self._log_artifact(trainer)

    # ---- work ---------------------------------------------------------------------------
    @rank_zero_only
    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule,
             unseen: bool = False) -> None:
        step = trainer.global_step
        if step == self._last_step:  # e.g. the last periodic eval is also the end
            if unseen and self.unseen_eval_seeds and self.history and not any(
                    k.startswith("sim_") for k in self.history[-1]):
                self._run_unseen(trainer, pl_module, self.history[-1])
            return
        self._last_step = step
        res = evaluate_policy(pl_module.policy, **self.eval_kwargs,
                              progress=f"[sim eval] step {step}")
        row = {"step": step, **res.metrics(), "sim/eval_seconds": res.seconds}
        wm = world_model_success(pl_module, step - (self.history[-1]["step"] if self.history
                                                    else 0))
        if wm is not None:
            row["wm/success"] = wm
        paired = self._run_side_by_side(trainer, pl_module, step, res, row) \
            if self.side_by_side else ""
        self.history.append(row)
        for lg in trainer.loggers:
            lg.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)
        out = self._out_dir(trainer)
        os.makedirs(out, exist_ok=True)
        paths = [save_gif(fr, os.path.join(out, f"step{step:06d}_{task}_{i}_"
                                                f"{'ok' if ok else 'fail'}.gif"))
                 for i, (task, fr, ok) in enumerate(res.videos)]
        plot = save_success_plot(self.history, os.path.join(out, "success_vs_step.png"))
        self._log_media(trainer, step, paths, plot)
        print(f"[sim eval] step {step}: success {res.describe()} "
              + " ".join(f"{k} {v:.2f}" for k, v in res.success.items())
              + f" ({res.seconds:.0f} s)"
              + ("" if wm is None else f" | world model's success since last eval {wm:.3f}")
              + paired, flush=True)
        if unseen and self.unseen_eval_seeds:
            self._run_unseen(trainer, pl_module, row)
        else:
            self._write_history(trainer)

    def _run_side_by_side(self, trainer: L.Trainer, pl_module: L.LightningModule,
                          step: int, res: EvalResult, row: dict) -> str:
        """``side_by_side.scenes`` scenes of ``res`` (this step's eval) again in the world
        model, from the same first frames (``wmrl.eval.side_by_side.imagined_beside_eval``):
        ``paired_gap``'s figures into ``row``, a row per scene in
        ``<out_dir>/side_by_side/side_by_side.jsonl``, a GIF (imagined | real) for each scene
        the eval kept a video of (``num_videos``), with wandb the videos and a
        ``wandb.Table``. Returns the printed line's part."""
        sbs, kw = self.side_by_side, self.eval_kwargs
        pace = getattr(pl_module, "pace", None)  # the world model PACE refined, if it did
        weights = pace.current_state() if pace is not None and pace.ledger.version > 0 else None
        task = next(iter(res.outcomes))  # evaluate_policy's name of tasks[0]
        t0 = time.perf_counter()
        scenes = imagined_beside_eval(
            pl_module.policy, sbs["env"], kw["tasks"][0],
            res.outcomes[task][:int(sbs["scenes"])],
            [frames for name, frames, _ in res.videos if name == task],
            int(sbs["chunk"]), int(sbs["max_episode_steps"]), kw["env"], kw["temperature"],
            kw["seed"], weights)
        # the imagined actions in the simulator: is what the world model calls success one?
        replay_in_simulator(scenes, kw["tasks"][0],
                            {**kw["env"], "max_episode_steps": int(sbs["max_episode_steps"])})
        seconds = time.perf_counter() - t0
        paired = paired_gap(scenes)
        row.update(paired)
        out = os.path.join(self._out_dir(trainer), "side_by_side")
        os.makedirs(out, exist_ok=True)
        rows, paths = [], []
        for r in scenes:
            verdict = (f"wm_{'ok' if r.imagined_success else 'fail'}_"
                       f"sim_{'ok' if r.real_success else 'fail'}")
            if len(r.real) > 1:  # the eval kept this scene's video
                paths.append(save_gif(side_by_side_video(r.imagined, r.real),
                                      os.path.join(out, f"step{step:06d}_scene{r.scene}_"
                                                        f"{verdict}.gif")))
            rows.append({"step": step, "scene": r.scene, "imagined_success": r.imagined_success,
                         "imagined_return": r.imagined_return, "peak_score": r.peak_score,
                         "sim_success": r.real_success,
                         "replayed_sim_success": r.replayed_success})
        with open(os.path.join(out, "side_by_side.jsonl"), "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        self._log_side_by_side(trainer, step, rows, paths)
        p = {k.removeprefix("sim/paired_"): v for k, v in paired.items()}
        interval = (f" [{100 * p['gap_ci95_low']:+.1f}, {100 * p['gap_ci95_high']:+.1f}]"
                    if "gap_ci95_low" in p else "")
        return (f" | imagined vs real on {len(scenes)} scenes: world model "
                f"{100 * p['wm_success']:.1f}%, simulator {100 * p['sim_success']:.1f}%, gap "
                f"{100 * p['gap']:+.1f} points{interval}, agree {100 * p['agreement']:.1f}%; "
                f"its actions in the simulator {100 * p['replay_success']:.1f}%, imagined "
                f"successes real {100 * p['replay_precision']:.1f}% ({seconds:.0f} s)")

    @staticmethod
    def _log_side_by_side(trainer: L.Trainer, step: int, rows: list[dict],
                          paths: list[str]) -> None:
        from lightning.pytorch.loggers import WandbLogger

        for lg in trainer.loggers:
            if isinstance(lg, WandbLogger):
                import wandb

                table = wandb.Table(columns=list(rows[0]), data=[list(r.values()) for r in rows])
                media = {"sim/side_by_side_table": table, "trainer/global_step": step}
                if paths:
                    media["sim/side_by_side"] = [wandb.Video(p, format="gif") for p in paths]
                lg.experiment.log(media)

    def _run_unseen(self, trainer: L.Trainer, pl_module: L.LightningModule, row: dict) -> None:
        """Score the unseen scene sets into ``row`` (the eval of this step) and log them."""
        extra = {}
        for name, eval_seed in self.unseen_eval_seeds.items():
            kw = {**self.eval_kwargs, "num_videos": 0,
                  "env": {**self.eval_kwargs["env"], "eval_seed": eval_seed}}
            res = evaluate_policy(pl_module.policy, **kw,
                                  progress=f"[sim eval] step {row['step']}: {name} scenes")
            extra.update({**res.metrics(f"sim_{name}"), f"sim_{name}/eval_seed": eval_seed})
            print(f"[sim eval] step {row['step']}: {name} scenes (eval_seed {eval_seed}): "
                  f"success {res.describe()} ({res.seconds:.0f} s)",
                  flush=True)
        row.update(extra)
        for lg in trainer.loggers:
            lg.log_metrics(extra, step=row["step"])
        self._write_history(trainer)

    def _write_history(self, trainer: L.Trainer) -> None:
        """``history.jsonl``: every eval so far, rewritten whole (atomically)."""
        out = self._out_dir(trainer)
        with atomic_path(os.path.join(out, "history.jsonl")) as tmp, open(tmp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in self.history)

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
