"""The run length (``trainer.max_steps``), chosen on held-out scenes, not on the reported ones.

    python scripts/fit.py -m seed=0,1,2 logger=csv checkpoint.every_n_steps=5 \\
        checkpoint.keep_last=-1 callbacks.sim_eval=null hydra.sweep.dir=multirun/len \\
        'hydra.sweep.subdir=seed${seed}'
    python scripts/choose_run_length.py multirun/len/seed* --out multirun/len/choice.json

Every step checkpoint (``RUN/checkpoints/step-NNNNNN.ckpt``, ``callbacks/preemption.py``) of
each run (one per training seed) is scored in the simulator, success_once on ``--states``
fixed scenes of ``--eval-seed`` (default 2: neither the training scenes, ``task.eval_seed`` 0,
nor the unseen ones, ``task.unseen_eval_seed`` 1, which docs/results.md's figures are measured on;
those two are refused). Step 0 is the base policy (no checkpoint). For each step held by every
run it prints the success per run and the mean +- standard error over runs, and picks the step
with the highest mean (a tie goes to the shorter run); one JSON line holds it all.

With a constant learning rate (``algorithm.lr_schedule=constant``, the default) the step-N
checkpoint of a longer run is the policy a run with ``trainer.max_steps=N`` ends with, so the
choice carries over to the shorter run. Hydra overrides after the flags go to
``conf/eval.yaml`` (``policy=...``, ``num_envs=...``), as in ``scripts/eval.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wmrl.atomic import write_text  # noqa: E402
from wmrl.config import ConfigError  # noqa: E402
from wmrl.eval.held_out import held_out_config, simulator_success  # noqa: E402
from wmrl.stats import mean_se  # noqa: E402

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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="scripts/fit.py run dirs, one per training seed")
    p.add_argument("--eval-seed", type=int, default=2, help="the held-out scene set")
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--out", default=None, help="write the JSON here too")
    args, overrides = p.parse_known_args(argv)
    try:
        out = score(args.runs, args.eval_seed, args.states, overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    for step, row in out["by_step"].items():
        vals = " ".join(f"{100 * v:.1f}" for v in row["values"])
        mark = "  <- best" if step == out["best_step"] else ""
        print(f"step {step:>4}: {100 * row['mean']:.1f} +- {100 * row['se']:.1f} ({vals}){mark}")
    print(json.dumps(out))
    if args.out:
        write_text(args.out, json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
