"""Learning figures over training seeds (``scripts/seed_report.py``, whose docstring lists
them): from each fit run dir's ``sim_eval/history.jsonl``, csv log, ``held_out.json`` and
``pace/summary.json``, the mean +- standard error over runs (SE = sample std / sqrt(n)) with
the 95% t-interval of the mean (``wmrl.measure.stats``), and with ``against`` the paired differences
(this arm minus the baseline run of the same training seed)."""

from __future__ import annotations

import json
import math
import os

from omegaconf import OmegaConf

from wmrl.eval.held_out import read_held_out
from wmrl.measure.run_logs import RunLogError, read_metric
from wmrl.measure.stats import mean_se, pearson, t_interval


def read_seed(run: str) -> int:
    """The training seed of a run: ``seed`` in the config.yaml that every fit writes."""
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
    # imagined minus simulated success of the same policy on the same scenes, every eval
    out["paired_gap"] = [r["sim/paired_gap"] for r in rows if "sim/paired_gap" in r]
    # the share of imagined successes whose actions succeed in the simulator, every eval
    out["replay_precision"] = [r["sim/paired_replay_precision"] for r in rows
                               if "sim/paired_replay_precision" in r]
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
    """``{"per_run": [run_figures...], "summary": {...}}`` (the module docstring's figures);
    ``against``: the baseline runs, paired by training seed."""
    per_run = [run_figures(r, signal) for r in runs]
    summary: dict = {"runs": len(per_run), "signal_metric": signal}
    for key in sorted({k for r in per_run for k in r if k.startswith("gain_")}):
        summary[key] = _summary([r[key] for r in per_run if key in r])
    summary["real_episodes"] = [r["real_episodes"] for r in per_run]
    gaps = [g for r in per_run for g in r["wm_gap"]]
    summary["max_abs_wm_gap"] = float(max(map(abs, gaps))) if gaps else float("nan")
    paired_gaps = [g for r in per_run for g in r["paired_gap"]]
    summary["max_abs_paired_gap"] = (float(max(map(abs, paired_gaps))) if paired_gaps
                                     else float("nan"))
    precisions = [p for r in per_run for p in r["replay_precision"] if math.isfinite(p)]
    summary["min_replay_precision"] = min(precisions) if precisions else float("nan")
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


def report_lines(res: dict) -> list[str]:
    """The readable lines: one per run, then each gain's mean +- SE (and the paired ones)."""
    lines = []
    for r in res["per_run"]:
        evals = " ".join(f"{s}:{100 * v:.1f}" for s, v in zip(r["steps"], r["sim"]))
        extra = "".join(f" | {k} {100 * v:+.1f}" for k, v in r.items()
                        if k.startswith("gain_") and k != "gain_train")
        gaps = " ".join(f"{100 * g:+.1f}" for g in r["wm_gap"])
        paired = " ".join(f"{100 * g:+.1f}" for g in r["paired_gap"])
        real = " ".join(f"{100 * p:.0f}%" if math.isfinite(p) else "n/a"  # (none imagined)
                        for p in r["replay_precision"])
        lines.append(f"{r['run']}: sim {evals} | gain {100 * r['gain_train']:+.1f}{extra} | "
                     f"wm - sim {gaps} | paired wm - sim {paired or '-'} | imagined successes "
                     f"real {real or '-'} | real episodes {r['real_episodes']}")
    for key, v in res["summary"].items():
        if key.startswith("gain_"):
            lines.append(f"{key}: {_pm(v)}")
    for key, v in res["summary"].get("paired", {}).items():
        if key.startswith("gain_"):
            diffs = ", ".join(f"{100 * d:+.1f}" for d in v["values"])
            lines.append(f"paired {key}: {_pm(v)} vs the baseline (seeds {v['seeds']}: {diffs})")
    return lines
