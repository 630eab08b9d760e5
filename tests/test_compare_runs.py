"""scripts/compare_runs.py (wmrl/eval/compare_runs.py) and wmrl/measure/run_logs.py on synthetic
metrics.csv logs whose figures are known by construction (correlation 1/sqrt(2), a shift,
identical windows)."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from wmrl.eval.compare_runs import compare_runs
from wmrl.measure.run_logs import RunLogError, compare, read_metric
from wmrl.measure.stats import mean_se, pearson, t_interval, welch, wilson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M = "rollout/success"


def write_metrics(path: str, steps, values, extra_rows=()) -> str:
    """A metrics.csv as Lightning's CSVLogger writes it: one row per log call, the columns of
    every metric, empty cells where a row lacks one (here: a sim-eval row at every 10th step
    and a NaN row)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cols = ["epoch", "loss", M, "sim/success", "step"]
    rows = [{"epoch": 0, "loss": 0.1, M: repr(float(v)), "step": int(s)}
            for s, v in zip(steps, values)]
    rows += [{"sim/success": 0.5, "step": int(s)} for s in steps if s % 10 == 0]
    rows += [{M: "nan", "step": 999}, *extra_rows]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(rows)
    return path


def series(tmp_path, name, steps, values, **kw):
    return read_metric(write_metrics(str(tmp_path / name / "csv" / "version_0" / "metrics.csv"),
                                     steps, values, **kw), M)


def test_reader_skips_empty_and_nan_cells_and_keeps_a_relogged_steps_last_row(tmp_path):
    run = tmp_path / "run"
    write_metrics(str(run / "csv" / "version_0" / "metrics.csv"), [1, 2, 3], [0.1, 0.2, 0.3],
                  extra_rows=[{M: 0.25, "step": 2}])  # a resume re-logged step 2
    s = read_metric(str(run), M)  # the run dir finds csv/version_0/metrics.csv
    assert s.steps.tolist() == [1, 2, 3]
    assert s.values.tolist() == [0.1, 0.25, 0.3]
    with pytest.raises(RunLogError, match="no metric 'nope'.*rollout/success"):
        read_metric(str(run), "nope")
    wandb_only = tmp_path / "wandb_run" / "wandb" / "offline-run-1-x"
    wandb_only.mkdir(parents=True)
    (wandb_only / "run-x.wandb").write_bytes(b"")
    with pytest.raises(RunLogError, match="only a wandb offline run.*logger=csv"):
        read_metric(str(tmp_path / "wandb_run"), M)


def test_correlation_of_orthogonal_noise_is_one_over_sqrt2(tmp_path):
    # a = (1,-1,1,-1,...), y = (1,1,-1,-1,...): both mean 0, variance 1, a.y = 0, so
    # corr(a, a + y) = cov(a, a) / sqrt(var(a) var(a + y)) = 1 / sqrt(1 * 2)
    n = 40
    steps = np.arange(1, n + 1)
    a = np.tile([1.0, -1.0, 1.0, -1.0], n // 4)
    y = np.tile([1.0, 1.0, -1.0, -1.0], n // 4)
    res = compare(series(tmp_path, "a", steps, a), series(tmp_path, "b", steps, a + y), 20)
    assert res["n_common"] == n and (res["first_step"], res["last_step"]) == (1, n)
    assert res["pearson"] == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    assert res["mean_diff"] == pytest.approx(0.0, abs=1e-12)  # mean(y) = 0
    assert res["final_diff"] == pytest.approx(y[-1])  # -1


def test_small_noise_correlation_matches_numpy(tmp_path):
    rng = np.random.default_rng(0)
    steps = np.arange(0, 60)
    a = np.linspace(0.2, 0.6, 60) + 0.05 * rng.standard_normal(60)
    b = a + 0.01 * rng.standard_normal(60)
    res = compare(series(tmp_path, "a", steps, a), series(tmp_path, "b", steps, b), 20)
    assert res["pearson"] == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-12)
    assert res["pearson"] > 0.99
    assert res["mean_diff"] == pytest.approx(np.mean(b - a), abs=1e-12)


def test_shift_is_the_mean_and_final_difference_and_steps_align(tmp_path):
    steps = np.arange(1, 31)
    a = 0.3 + 0.01 * steps
    # b logged every step of 1..40, a only 1..30: the common steps are 1..30
    sb = np.arange(1, 41)
    b = 0.3 + 0.01 * sb + 0.125
    res = compare(series(tmp_path, "a", steps, a), series(tmp_path, "b", sb, b), window=10)
    assert (res["n_a"], res["n_b"], res["n_common"]) == (30, 40, 30)
    assert res["last_step"] == 30 and res["window_first_step"] == 21
    assert res["mean_diff"] == pytest.approx(0.125, abs=1e-12)
    assert res["final_diff"] == pytest.approx(0.125, abs=1e-12)
    assert res["window_diff"] == pytest.approx(0.125, abs=1e-12)
    assert res["pearson"] == pytest.approx(1.0, abs=1e-12)
    # the two windows differ by 0.125 with the same spread: t = 0.125 / sqrt(2 var / 10)
    var = np.var(a[-10:], ddof=1)
    assert res["welch_t"] == pytest.approx(0.125 / math.sqrt(2 * var / 10))
    assert res["welch_df"] == pytest.approx(18.0)  # equal n and variance: 2 (n - 1)
    assert res["p_value"] < 1e-6


def test_identical_last_windows_give_p_one(tmp_path):
    steps = np.arange(1, 41)
    a = np.sin(steps / 3.0)
    b = a.copy()
    b[:20] += 1.0  # different early, the same over the last 20 steps
    res = compare(series(tmp_path, "a", steps, a), series(tmp_path, "b", steps, b), 20)
    assert res["welch_t"] == 0.0
    assert res["p_value"] == pytest.approx(1.0, abs=1e-12)
    assert res["mean_diff"] == pytest.approx(0.5)


def test_statistics_hand_checked():
    # Welch by hand: means 1 and 3, variances 2 and 2, n 2 and 2: t = 2 / sqrt(2/2 + 2/2),
    # df = (1 + 1)^2 / (1/1 + 1/1) = 2, and for df = 2 P(|T| >= t) = 1 - t / sqrt(2 + t^2)
    w = welch([0.0, 2.0], [2.0, 4.0])
    assert w["t"] == pytest.approx(math.sqrt(2)) and w["df"] == pytest.approx(2.0)
    assert w["p"] == pytest.approx(1 - math.sqrt(2) / 2, abs=1e-12)
    assert welch([1.0, 1.0], [1.0, 1.0])["p"] == 1.0 and welch([1.0, 1.0], [2.0, 2.0])["p"] == 0.0
    assert math.isnan(welch([1.0], [2.0, 3.0])["p"])
    # Wilson: 113 of 256 -> (k + z^2/2 -+ z sqrt(k(n-k)/n + z^2/4)) / (n + z^2), z = 1.95996
    z, k, n = 1.959964, 113, 256
    half = z * math.sqrt(k * (n - k) / n + z * z / 4)
    lo, hi = wilson(k, n)
    assert lo == pytest.approx((k + z * z / 2 - half) / (n + z * z), abs=1e-6)
    assert hi == pytest.approx((k + z * z / 2 + half) / (n + z * z), abs=1e-6)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == (38.2, 50.3)
    # mean +- SE and the t-interval over 3 seeds: SE = 0.02 / sqrt(3), t_{0.975, 2} = 4.3027
    m, se = mean_se([0.08, 0.10, 0.12])
    assert m == pytest.approx(0.10) and se == pytest.approx(0.02 / math.sqrt(3))
    _, lo, hi = t_interval([0.08, 0.10, 0.12])
    assert hi - m == pytest.approx(4.302653 * se, rel=1e-6) and lo == pytest.approx(2 * m - hi)
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert math.isnan(pearson([1.0, 1.0], [2.0, 3.0]))

def test_cli_prints_figures_as_json_and_writes_the_plot(tmp_path):
    steps = np.arange(1, 31)
    a = 0.3 + 0.01 * steps
    run_a = tmp_path / "run_a"
    write_metrics(str(run_a / "csv" / "version_0" / "metrics.csv"), steps, a)
    csv_b = write_metrics(str(tmp_path / "b" / "metrics.csv"), steps, a + 0.125)
    out = tmp_path / "plots" / "cmp.png"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compare_runs.py"),
                           str(run_a), csv_b, "--metric", M, "--window", "10", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    readable, line = proc.stdout.strip().splitlines()[-2:]
    res = json.loads(line)
    assert res["metric"] == M and res["n_common"] == 30 and res["window_n"] == 10
    assert res["mean_diff"] == pytest.approx(0.125) and res["final_diff"] == pytest.approx(0.125)
    assert res["pearson"] == pytest.approx(1.0)
    assert res["p_value"] < 1e-6 and res["plot"] == str(out)
    assert "pearson 1.000" in readable and "mean diff (B-A) +0.1250" in readable
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_metric_is_named_before_the_plot_is_written(tmp_path):
    path = write_metrics(str(tmp_path / "metrics.csv"), [1, 2], [0.1, 0.2])
    with pytest.raises(RunLogError, match="no metric 'nope'"):
        compare_runs(path, path, metric="nope", out=str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()
