"""wmrl.eval.seed_report (scripts/seed_report.py) on synthetic run dirs whose figures are known
by construction."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from wmrl.eval import seed_report
from wmrl.measure.run_logs import RunLogError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def printed(runs, against=None) -> str:
    return "\n".join(seed_report.report_lines(seed_report.report(runs, against=against)))


def make_run(root, name, sim, unseen, wm, fragile, paired=(None, None, None),
             precision=(None, None, None)):
    """sim: success at steps 0/10/20; unseen: at 0 and 20; wm: the world model's at 10/20;
    fragile: the signal, constant within each interval; paired: sim/paired_gap at 0/10/20
    (None: that eval had no side-by-side)."""
    run = root / name
    (run / "sim_eval").mkdir(parents=True)
    rows = [{"step": 0, "sim/success": sim[0], "sim_unseen/success": unseen[0]},
            {"step": 10, "sim/success": sim[1], "wm/success": wm[0]},
            {"step": 20, "sim/success": sim[2], "wm/success": wm[1],
             "sim_unseen/success": unseen[1]}]
    for row, gap, p in zip(rows, paired, precision):
        if gap is not None:
            row["sim/paired_gap"] = gap
        if p is not None:
            row["sim/paired_replay_precision"] = p
    (run / "sim_eval" / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    csv_dir = run / "csv" / "version_0"
    csv_dir.mkdir(parents=True)
    lines = ["step,wm/fragile_success"] + [f"{s},{fragile[(s - 1) // 10]}" for s in range(1, 21)]
    (csv_dir / "metrics.csv").write_text("\n".join(lines) + "\n")
    return str(run)


def test_gains_mean_se_gap_and_signal(tmp_path):
    runs = [make_run(tmp_path, "s0", [0.40, 0.45, 0.50], [0.42, 0.50], [0.30, 0.60], [0.1, 0.3],
                     paired=[-0.125, 0.0625, 0.25], precision=[0.25, 0.5, float("nan")]),
            make_run(tmp_path, "s1", [0.40, 0.42, 0.46], [0.42, 0.46], [0.35, 0.50], [0.1, 0.2],
                     paired=[-0.3125, None, 0.0]),
            make_run(tmp_path, "s2", [0.40, 0.48, 0.54], [0.42, 0.54], [0.40, 0.44], [0.0, 0.1])]
    res = seed_report.report(runs)["summary"]
    # gains 0.10, 0.06, 0.14: mean 0.10, sample std 0.04, SE 0.04 / sqrt(3)
    assert res["gain_train"]["mean"] == pytest.approx(0.10)
    assert res["gain_train"]["se"] == pytest.approx(0.04 / math.sqrt(3))
    assert res["gain_train"]["min"] == pytest.approx(0.06)
    # 95% t-interval: 0.10 +- t_{0.975, 2} SE = 0.10 +- 4.3027 * 0.02309 = [0.0006, 0.1994]
    assert res["gain_train"]["ci95"] == pytest.approx([0.10 - 0.099367, 0.10 + 0.099367],
                                                      abs=1e-5)
    assert res["gain_unseen"]["values"] == pytest.approx([0.08, 0.04, 0.12])
    # wm - sim: -0.15, +0.10 | -0.07, +0.04 | -0.08, -0.10 -> largest |gap| 0.15
    assert res["max_abs_wm_gap"] == pytest.approx(0.15)
    # the paired gaps as logged at each eval (step 0 included); s2 has none: largest 0.3125
    assert seed_report.run_figures(runs[1], "wm/fragile_success")["paired_gap"] == [-0.3125, 0.0]
    assert res["max_abs_paired_gap"] == 0.3125
    # the share of imagined successes that are real, at s0's evals (NaN: none imagined)
    assert res["min_replay_precision"] == 0.25
    # 6 (signal, gap) points; by hand: r = corrcoef of these
    sig = [0.1, 0.3, 0.1, 0.2, 0.0, 0.1]
    gap = [-0.15, 0.10, -0.07, 0.04, -0.08, -0.10]
    assert res["signal_points"] == 6
    assert res["signal_vs_wm_gap_r"] == pytest.approx(np.corrcoef(sig, gap)[0, 1])
    assert res["real_episodes"] == [0, 0, 0]  # no PACE
    (tmp_path / "s1" / "pace").mkdir()
    (tmp_path / "s1" / "pace" / "summary.json").write_text(json.dumps({"real_episodes": 480}))
    assert seed_report.report(runs)["summary"]["real_episodes"] == [0, 480, 0]
    out = printed(runs)
    assert "real episodes 480" in out
    assert "| paired wm - sim -12.5 +6.2 +25.0 | imagined successes real 25% 50% n/a |" in out
    assert "| paired wm - sim - | imagined successes real - |" in out
    assert ("gain_train: +10.0 +- 2.3 points (mean +- SE, 95% CI [+0.1, +19.9], n=3, "
            "min +6.0)") in out


def test_against_pairs_runs_by_training_seed(tmp_path):
    def arm(name, gains, held_out=()):  # gains on the training / unseen scenes per seed 0, 1, 2
        runs = []
        for seed, (g, u) in enumerate(gains):
            run = make_run(tmp_path / name, f"s{seed}", [0.40, 0.40, 0.40 + g],
                           [0.42, 0.42 + u], [0.3, 0.3], [0.1, 0.1])
            (tmp_path / name / f"s{seed}" / "config.yaml").write_text(f"lr: 1.0\nseed: {seed}\n")
            if held_out:  # scripts/score_held_out.py's file: the base policy 0.44 on eval_seed 2
                (tmp_path / name / f"s{seed}" / "held_out.json").write_text(json.dumps(
                    {"eval_seed": 2, "states": 256, "base_success": 0.44,
                     "success": 0.44 + held_out[seed]}))
            runs.append(run)
        return runs

    base = arm("base", [(0.05, 0.02), (0.10, 0.04), (0.00, 0.06)], held_out=(0.10, 0.08, 0.12))
    new = arm("new", [(0.07, 0.02), (0.16, 0.00), (0.05, 0.06)], held_out=(0.05, 0.09, 0.04))
    # listed out of order: pairing goes by the config's seed, not by position
    res = seed_report.report(new, against=base[::-1])["summary"]["paired"]
    assert res["seeds"] == [0, 1, 2]
    # differences +0.02, +0.06, +0.05: mean 0.13 / 3, by hand
    assert res["gain_train"]["values"] == pytest.approx([0.02, 0.06, 0.05])
    assert res["gain_train"]["mean"] == pytest.approx(0.13 / 3)
    assert res["gain_unseen"]["values"] == pytest.approx([0.0, -0.04, 0.0])
    assert res["gain_unseen"]["se"] == pytest.approx(np.std([0.0, -0.04, 0.0], ddof=1) / 3 ** 0.5)
    # the held-out scenes: +0.05 - 0.10, +0.09 - 0.08, +0.04 - 0.12
    assert res["gain_held_out"]["values"] == pytest.approx([-0.05, 0.01, -0.08])
    assert res["gain_held_out"]["min"] == pytest.approx(-0.08)
    assert res["gain_held_out"]["seeds"] == [0, 1, 2]
    # SE 0.0120, t_{0.975, 2} = 4.3027: 0.0433 +- 0.0517
    assert ("paired gain_train: +4.3 +- 1.2 points (mean +- SE, 95% CI [-0.8, +9.5], n=3, "
            "min +2.0) vs the baseline") in printed(new, base)
    # a run not yet scored on the held-out scenes leaves its seed out of that pairing only
    os.remove(tmp_path / "new" / "s1" / "held_out.json")
    res = seed_report.report(new, against=base)["summary"]["paired"]
    assert res["gain_held_out"]["seeds"] == [0, 2] and res["gain_train"]["seeds"] == [0, 1, 2]
    assert res["gain_held_out"]["values"] == pytest.approx([-0.05, -0.08])
    assert "vs the baseline (seeds [0, 2]: -5.0, -8.0)" in printed(new, base)
    # a baseline with no shared seed is named
    (tmp_path / "base" / "s0" / "config.yaml").write_text("seed: 7\n")
    with pytest.raises(RunLogError, match="no baseline run shares a training seed"):
        seed_report.report(new[1:2], against=[base[0]])


def test_the_command_prints_the_lines_and_the_json_or_names_a_missing_history(tmp_path):
    def command(*runs):
        return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "seed_report.py"),
                               *runs], capture_output=True, text=True, timeout=120)

    run = make_run(tmp_path, "s0", [0.40, 0.45, 0.50], [0.42, 0.50], [0.30, 0.60], [0.1, 0.3])
    proc = command(run)
    assert proc.returncode == 0, proc.stderr
    *lines, last = proc.stdout.strip().splitlines()
    assert lines[0].startswith(f"{run}: sim 0:40.0 10:45.0 20:50.0 | gain +10.0")
    assert json.loads(last)["gain_train"]["values"] == pytest.approx([0.10])
    proc = command(str(tmp_path / "empty"))
    assert proc.returncode == 2 and "sim_eval/history.jsonl" in proc.stderr
