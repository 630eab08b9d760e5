"""GRPO step wall time per placement mode: the real trainer (Lightning + Ray actors) with the
tiny policy, tiny Wan env and tiny ResNet reward on CPU, all modes in one run, same seeds.
Reports the mean step time (after a warm-up step), the per-role breakdown and the idle
fraction (time inside the step when no role - env, policy, trainer - was busy).

Each mode runs twice, side by side: ``rollout.overlap_resets`` off, then on (the default: the
next step's env resets run during the update). ``placement.<mode>.overlap_resets`` compares
the two by the median whole-step wall time (batch end to batch end: rollout, update, weight
sync, checkpoint), since overlap moves reset time out of ``rollout_s`` and may slow what it
overlaps (the update, a collocated actor's weight sync); the per-role figures are the overlap
run's."""

from __future__ import annotations

import statistics
import tempfile
import time

import lightning as L

from wmrl.config import compose_config

MODES = (("collocated", 1), ("disaggregated", 1), ("hybrid", 2))


class _StepClock(L.Callback):
    """Wall time at the end of every training batch (after the weight sync and checkpoint)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, *args) -> None:
        self.ends.append(time.perf_counter())


def _fit(placement: str, stages: int, steps: int, num_envs: int, overlap: bool,
         group_size: int, max_episode_steps: int, overrides: tuple[str, ...]):
    from wmrl.fit import fit

    clock = _StepClock()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose_config("fit", [
            f"run_dir={tmp}", "logger=csv", "trainer.enable_progress_bar=false",
            f"trainer.max_steps={steps + 1}", f"rollout.placement={placement}",
            f"rollout.pipeline_stages={stages}", f"rollout.num_envs={num_envs}",
            f"rollout.overlap_resets={str(overlap).lower()}",
            f"rollout.group_size={group_size}", f"rollout.max_episode_steps={max_episode_steps}",
            # (nearly always) full-length episodes and an update every step, whatever the
            # reward says: timing, not learning (a sigmoid's p reaches 1.0 exactly only when
            # float32 saturates); no simulator evaluation (not timed)
            "env.success_threshold=1.0", "algorithm.filter_groups=false",
            "callbacks.sim_eval=null", *overrides,
        ])
        _, module = fit(cfg, extra_callbacks=[clock])
    walls = [b - a for a, b in zip(clock.ends, clock.ends[1:])]  # steps 2..: step 1 warms up
    return module.history[1:], statistics.median(walls)


def run(steps: int = 4, num_envs: int = 16, modes: tuple = MODES, group_size: int = 4,
        max_episode_steps: int = 32, overrides: tuple[str, ...] = (),
        compare_overlap: bool = True) -> list[dict]:
    """``steps`` timed steps (after a warm-up step) per mode and ``rollout.overlap_resets``
    setting; ``modes``: (placement, pipeline stages) pairs. Each stage gets whole groups:
    ``num_envs`` a multiple of ``group_size`` x stages. ``overrides``: more Hydra overrides of
    conf/fit.yaml. ``compare_overlap=False``: the overlap run only (half the fits)."""
    out = []
    sizes = {"group_size": group_size, "max_episode_steps": max_episode_steps,
             "overrides": tuple(overrides)}
    for placement, stages in modes:
        if compare_overlap:
            plain, wall_plain = _fit(placement, stages, steps, num_envs, overlap=False, **sizes)
        hist, wall = _fit(placement, stages, steps, num_envs, overlap=True, **sizes)

        def mean(key: str, hist: list[dict] = hist) -> float:
            return sum(h.get(key, 0.0) for h in hist) / len(hist)

        step_s = mean("time/rollout_s") + mean("time/train_s")
        out.append({"name": f"placement.{placement}.step_s", "value": round(step_s, 3),
                    "unit": "s", "num_envs": num_envs, "stages": stages,
                    **{k.split("/")[1]: round(mean(k), 3) for k in hist[0]
                       if k.startswith("time/") and k != "time/idle_frac"}})
        out.append({"name": f"placement.{placement}.idle_fraction",
                    "value": round(mean("time/idle_frac"), 4), "unit": "fraction"})
        if not compare_overlap:
            out.append({"name": f"placement.{placement}.overlap_resets",
                        "skipped": "compare_overlap=False (no run without overlap)"})
            continue
        out.append({"name": f"placement.{placement}.overlap_resets",
                    "value": round(wall_plain / wall, 3), "unit": "x (step time off / on)",
                    "wall_step_s_off": round(wall_plain, 3), "wall_step_s_on": round(wall, 3),
                    "rollout_s_off": round(mean("time/rollout_s", plain), 3),
                    "rollout_s_on": round(mean("time/rollout_s"), 3),
                    "train_s_off": round(mean("time/train_s", plain), 3),
                    "train_s_on": round(mean("time/train_s"), 3),
                    "reset_ahead_s": round(mean("time/reset_ahead_s"), 3)})
    return out
