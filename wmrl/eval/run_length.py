"""The run length (``trainer.max_steps``) chosen on held-out scenes (``scripts/choose_run_length.py``):
every step checkpoint of each run (one per training seed) scored in the simulator on the
held-out scene set (``held_out.py``), the base policy as step 0; per step the mean +- SE over
runs (SE = sample std / sqrt(n)), and the step with the highest mean (a tie goes to the
shorter run). With a constant learning rate the step-N checkpoint of a longer run is the
policy a run with ``trainer.max_steps=N`` ends with, so the choice carries over."""

from __future__ import annotations

import os
import re

from wmrl.config import ConfigError
from wmrl.eval.held_out import held_out_config, simulator_success
from wmrl.measure.stats import mean_se

STEP_FILE = re.compile(r"^step-(\d+)\.ckpt$")


def step_checkpoints(run: str) -> dict[int, str]:
    """``{step: path}`` of a fit run's step checkpoints (``last.ckpt`` is one of them too)."""
    d = os.path.join(run, "checkpoints")
    if not os.path.isdir(d):
        raise ConfigError(f"{run}: no checkpoints/ dir (a scripts/fit.py run dir?)")
    found = {int(m.group(1)): os.path.join(d, name) for name in os.listdir(d)
             if (m := STEP_FILE.match(name))}
    if not found:
        raise ConfigError(f"{d}: no step-NNNNNN.ckpt files; run the fit with "
                          "checkpoint.every_n_steps=N checkpoint.keep_last=-1")
    return found


def common_steps(runs: dict[str, dict[int, str]]) -> list[int]:
    """The steps every run has a checkpoint of (a run cut short limits the choice)."""
    steps = set.intersection(*(set(c) for c in runs.values()))
    if not steps:
        raise ConfigError("the runs share no checkpoint step: "
                          + "; ".join(f"{r}: {sorted(c)}" for r, c in runs.items()))
    return sorted(steps)


def choose(success: dict[int, list[float]]) -> dict:
    """Mean +- SE over runs per step; the step with the highest mean, the shorter on a tie."""
    rows = {}
    for step, vals in sorted(success.items()):
        mean, se = mean_se(vals)
        rows[step] = {"mean": mean, "se": se, "values": list(vals)}
    best = max(rows, key=lambda s: (round(rows[s]["mean"], 12), -s))
    return {"by_step": rows, "best_step": best}


def score(runs: list[str], eval_seed: int = 2, states: int = 256,
          overrides: list[str] | None = None) -> dict:
    """Every step checkpoint the runs share, and the base policy as step 0, scored on
    ``states`` scenes of ``eval_seed`` (``held_out_config``); ``choose``'s figures."""
    cfg = held_out_config(eval_seed, states, overrides, "choose the run length")
    ckpts = {r: step_checkpoints(r) for r in runs}
    steps = common_steps(ckpts)
    base_success = simulator_success(cfg)  # step 0: the base policy
    success = {0: [base_success] * len(runs)}
    for step in steps:
        success[step] = [simulator_success(cfg, ckpts[r][step]) for r in runs]
    out = choose(success)
    out.update(runs=runs, eval_seed=eval_seed, states=states)
    return out


def step_lines(out: dict) -> list[str]:
    """One readable line per step: the mean +- SE, each run's success, the chosen step marked."""
    lines = []
    for step, row in out["by_step"].items():
        vals = " ".join(f"{100 * v:.1f}" for v in row["values"])
        mark = "  <- best" if step == out["best_step"] else ""
        lines.append(f"step {step:>4}: {100 * row['mean']:.1f} +- {100 * row['se']:.1f} "
                     f"({vals}){mark}")
    return lines
