"""Learning figures over training seeds: what RL in the world model bought, as a distribution.

    python scripts/fit.py -m seed=0,1,2 logger=csv hydra.sweep.dir=multirun/fit
    python scripts/seed_report.py multirun/fit/*        # one run dir per seed

Reads each run's ``sim_eval/history.jsonl`` (``SimEvalCallback``) and, for the exploitation
signal, its csv log. Prints one line per run, then the mean +- standard error over runs
(SE = sample std / sqrt(n)) with the 95% t-interval of the mean and n (``wmrl.stats``), and
one JSON line with every figure:

* ``gain_train``: simulator success at the last eval minus step 0, on the scenes the world
  model starts from (the training scenes); ``gain_unseen``: the same on the unseen scene set
  (``callbacks.sim_eval.unseen_eval_seeds``), scored at start and end only;
* ``wm_gap``: world model's success (its rollouts since the previous eval) minus the
  simulator's at each eval after step 0; ``max_abs_wm_gap`` the largest over evals;
* ``signal``: Pearson r, over every (run, eval interval), of the interval's mean
  ``--signal`` metric (default ``wm/fragile_success``, ``env.resample_check``) against the
  interval's ``wm_gap`` and against its simulator gain; how well a simulator-free number
  tracks the world model running away from the simulator;
* ``gain_held_out``: the last checkpoint minus the base policy on the held-out scenes
  (``eval_seed`` 2, the set choices are made on), when ``scripts/score_held_out.py`` has
  written the run's ``held_out.json``;
* ``real_episodes``: the simulator episodes a run trained on (``pace/summary.json``, written
  by ``wmrl.pace.round.Pace``; 0 for a run without PACE): its simulator budget, to set beside the
  oracle's (``experiment=sim_oracle``: every rollout is real).

``--against BASELINE_RUNS...`` compares two arms seed by seed: each run is paired with the
baseline run of the same training seed (``seed`` in each run's ``config.yaml``), and
``paired.<gain>`` holds the differences (this arm minus the baseline) with their mean +- SE and
the seeds they come from (a pair counts where both runs have the gain, e.g. both scored held out).
Runs of one seed start alike and share their sampling noise, so the paired difference is the
fairer test of an arm than two means side by side.

    python scripts/seed_report.py multirun/pace/* --against multirun/fit/*
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wmrl.eval.held_out import read_held_out  # noqa: E402
from wmrl.run_logs import RunLogError, read_metric  # noqa: E402
from wmrl.stats import mean_se, pearson, t_interval  # noqa: E402


def read_seed(run: str) -> int:
    """The training seed of a run: ``seed`` in the config.yaml that every fit writes."""
    from omegaconf import OmegaConf

    path = os.path.join(run, "config.yaml")
    if not os.path.isfile(path):
        raise RunLogError(f"{run}: no config.yaml (written by every scripts/fit.py run); "
                          "--against pairs runs by its `seed`")
    seed = OmegaConf.load(path).get("seed")
    if seed is None:
        raise RunLogError(f"{path}: no `seed` key to pair runs by")
    return int(seed)


def paired(per_run: list[dict], baseline: list[dict]) -> dict:
    """Per gain key: this arm minus the baseline, run by run of the same training seed."""
    by_seed = {}
    for b in baseline:
        if b["seed"] in by_seed:
            raise RunLogError(f"--against: seed {b['seed']} twice ({by_seed[b['seed']]['run']}, "
                              f"{b['run']})")
        by_seed[b["seed"]] = b
    pairs = [(r, by_seed[r["seed"]]) for r in per_run if r["seed"] in by_seed]
    if not pairs:
        raise RunLogError("--against: no baseline run shares a training seed with the runs "
                          f"(seeds {[r['seed'] for r in per_run]} vs {sorted(by_seed)})")
    out = {"seeds": [r["seed"] for r, _ in pairs]}
    for key in sorted({k for r, _ in pairs for k in r if k.startswith("gain_")}):
        both = [(r, b) for r, b in pairs if key in r and key in b]  # e.g. held-out not yet scored
        if both:
            out[key] = dict(_summary([r[key] - b[key] for r, b in both]),
                            seeds=[r["seed"] for r, _ in both])
    return out


def read_history(run: str) -> list[dict]:
    path = os.path.join(run, "sim_eval", "history.jsonl")
    if not os.path.isfile(path):
        raise RunLogError(f"{run}: no sim_eval/history.jsonl (a fit with callbacks.sim_eval on)")
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) < 2 or rows[0]["step"] != 0:
        raise RunLogError(f"{path}: needs the step-0 eval and at least one more")
    return rows


def run_figures(run: str, signal: str) -> dict:
    rows = read_history(run)
    first, last = rows[0], rows[-1]
    out = {"run": run, "steps": [r["step"] for r in rows],
           "sim": [r["sim/success"] for r in rows],
           "gain_train": last["sim/success"] - first["sim/success"]}
    unseen = sorted({k.split("/")[0] for k in first if k.startswith("sim_")
                     and k.endswith("/success")})
    for name in unseen:  # e.g. sim_unseen -> gain_unseen
        key = f"{name}/success"
        if key in last:
            out[f"gain_{name.removeprefix('sim_')}"] = last[key] - first[key]
            out[name] = [first[key], last[key]]
    held_out = read_held_out(run)  # scripts/score_held_out.py: the last checkpoint, eval_seed 2
    if held_out is not None:
        out["gain_held_out"] = held_out["success"] - held_out["base_success"]
        out["held_out"] = [held_out["base_success"], held_out["success"]]
    pace = os.path.join(run, "pace", "summary.json")
    if os.path.isfile(pace):
        with open(pace) as f:
            out["real_episodes"] = int(json.load(f)["real_episodes"])
    else:
        out["real_episodes"] = 0
    out["wm_gap"] = [r["wm/success"] - r["sim/success"] for r in rows[1:] if "wm/success" in r]
    try:
        series = read_metric(run, signal)
    except RunLogError:
        series = None
    out["signal"] = []
    if series is not None:
        for prev, cur in zip(rows, rows[1:]):
            inside = (series.steps > prev["step"]) & (series.steps <= cur["step"])
            out["signal"].append(float(series.values[inside].mean()) if inside.any()
                                 else float("nan"))
    return out


def _summary(values: list[float]) -> dict:
    """Mean, SE, the 95% t-interval of the mean (n - 1 degrees of freedom), the lowest."""
    m, se = mean_se(values)
    _, lo, hi = t_interval(values)
    return {"mean": m, "se": se, "ci95": [lo, hi], "min": float(min(values)),
            "values": list(values)}


def _pm(v: dict) -> str:
    lo, hi = v["ci95"]
    return (f"{100 * v['mean']:+.1f} +- {100 * v['se']:.1f} points (mean +- SE, 95% CI "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}], n={len(v['values'])}, "
            f"min {100 * v['min']:+.1f})")


def report(runs: list[str], signal: str = "wm/fragile_success",
           against: list[str] | None = None) -> dict:
    per_run = [run_figures(r, signal) for r in runs]
    summary: dict = {"runs": len(per_run), "signal_metric": signal}
    for key in sorted({k for r in per_run for k in r if k.startswith("gain_")}):
        summary[key] = _summary([r[key] for r in per_run if key in r])
    summary["real_episodes"] = [r["real_episodes"] for r in per_run]
    gaps = [g for r in per_run for g in r["wm_gap"]]
    summary["max_abs_wm_gap"] = float(max(map(abs, gaps))) if gaps else float("nan")
    pts = [(s, g, b - a) for r in per_run if r["signal"]
           for s, g, a, b in zip(r["signal"], r["wm_gap"], r["sim"], r["sim"][1:])
           if math.isfinite(s)]
    if pts:
        s, g, d = map(list, zip(*pts))
        summary["signal_vs_wm_gap_r"] = pearson(s, g)
        summary["signal_vs_sim_gain_r"] = pearson(s, d)
        summary["signal_points"] = len(pts)
    if against:
        for r in per_run:
            r["seed"] = read_seed(r["run"])
        base = [dict(run_figures(b, signal), seed=read_seed(b)) for b in against]
        summary["paired"] = paired(per_run, base)
    return {"per_run": per_run, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run dirs of scripts/fit.py (one per seed)")
    ap.add_argument("--signal", default="wm/fragile_success",
                    help="a per-step metric to relate to the world model / simulator gap")
    ap.add_argument("--against", nargs="+", metavar="BASELINE_RUN",
                    help="baseline run dirs: print this arm minus the baseline, paired by seed")
    args = ap.parse_args(argv)
    try:
        res = report(args.runs, args.signal, args.against)
    except RunLogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for r in res["per_run"]:
        evals = " ".join(f"{s}:{100 * v:.1f}" for s, v in zip(r["steps"], r["sim"]))
        extra = "".join(f" | {k} {100 * v:+.1f}" for k, v in r.items()
                        if k.startswith("gain_") and k != "gain_train")
        gaps = " ".join(f"{100 * g:+.1f}" for g in r["wm_gap"])
        print(f"{r['run']}: sim {evals} | gain {100 * r['gain_train']:+.1f}{extra} | "
              f"wm - sim {gaps} | real episodes {r['real_episodes']}")
    for key, v in res["summary"].items():
        if key.startswith("gain_"):
            print(f"{key}: {_pm(v)}")
    for key, v in res["summary"].get("paired", {}).items():
        if key.startswith("gain_"):
            diffs = ", ".join(f"{100 * d:+.1f}" for d in v["values"])
            print(f"paired {key}: {_pm(v)} vs the baseline (seeds {v['seeds']}: {diffs})")
    print(json.dumps(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
