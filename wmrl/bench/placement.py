"""GRPO step wall time per placement mode: the real trainer (Lightning + Ray actors) with the
tiny policy, tiny Wan env and tiny ResNet reward on CPU, all modes in one run, same seeds.
Reports the mean step time (after a warm-up step), the per-role breakdown and the idle
fraction (time inside the step when no role - env, policy, trainer - was busy)."""

from __future__ import annotations

import os
import tempfile

from hydra import compose, initialize_config_dir

MODES = (("collocated", 1), ("disaggregated", 1), ("hybrid", 2))
CONF = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "conf"))


def run(steps: int = 3, num_envs: int = 16) -> list[dict]:
    from wmrl.fit import fit

    out = []
    for placement, stages in MODES:
        with tempfile.TemporaryDirectory() as tmp, \
                initialize_config_dir(CONF, version_base="1.3"):
            cfg = compose("fit", overrides=[
                f"run_dir={tmp}", "logger=csv", "trainer.enable_progress_bar=false",
                f"trainer.max_steps={steps + 1}", f"rollout.placement={placement}",
                f"rollout.pipeline_stages={stages}", f"rollout.num_envs={num_envs}",
                "rollout.group_size=4", "rollout.max_episode_steps=32",
                # full-length episodes and an update every step, whatever the (random) reward
                # says: timing, not learning
                "env.success_threshold=1.01", "algorithm.filter_groups=false",
            ])
            _, module = fit(cfg)
        hist = module.history[1:]  # step 1 builds models and warms caches

        def mean(key: str, hist: list[dict] = hist) -> float:
            return sum(h.get(key, 0.0) for h in hist) / len(hist)

        step_s = mean("time/rollout_s") + mean("time/train_s")
        out.append({"name": f"placement.{placement}.step_s", "value": round(step_s, 3),
                    "unit": "s", "num_envs": num_envs, "stages": stages,
                    **{k.split("/")[1]: round(mean(k), 3) for k in hist[0]
                       if k.startswith("time/") and k != "time/idle_frac"}})
        out.append({"name": f"placement.{placement}.idle_fraction",
                    "value": round(mean("time/idle_frac"), 4), "unit": "fraction"})
    return out
