"""The fidelity report's metrics on hand-made frames, and one report of a tiny random world
model on two tiny episodes (no MuJoCo)."""

import json
import math

import numpy as np
import pytest

from tests.tiny_models import tiny_world_model
from wmrl.errors import ConfigError
from wmrl.eval.wm_fidelity import block_centres, block_errors, chunk_row, run_report
from wmrl.sim.dataset import Episode, TrajectoryWriter

SIZE = 32
GREY = 100


def square(y: int, x: int, side: int = 4, colour=(220, 40, 40)) -> np.ndarray:
    """A grey frame with a ``side``-px square of ``colour`` whose top-left pixel is (y, x)."""
    f = np.full((SIZE, SIZE, 3), GREY, np.uint8)
    f[y:y + side, x:x + side] = colour
    return f


def test_block_centre_of_a_square_and_a_missing_one():
    frames = np.stack([square(4, 10), np.full((SIZE, SIZE, 3), GREY, np.uint8)])
    centre, present = block_centres(frames, "red")
    assert present.tolist() == [True, False]
    assert centre[0].tolist() == [5.5, 11.5]  # rows 4..7, cols 10..13
    assert np.isnan(centre[1]).all()
    # a blue square is not red, and blue's rule finds it
    blue = square(20, 2, colour=(30, 40, 200))
    assert not block_centres(blue, "red")[1]
    assert block_centres(blue, "blue")[0].tolist() == [21.5, 3.5]


def test_block_errors_and_vanishing():
    recorded = np.stack([square(4, 10), square(16, 16)])
    first = np.stack([square(4, 10), square(10, 16)])  # episode 1's block moved 6 rows
    imagined = np.stack([square(4, 13), np.full((SIZE, SIZE, 3), GREY, np.uint8)])
    e = block_errors(imagined, recorded, first, "red")
    assert e["median_px"] == e["mean_px"] == 3.0  # only episode 0 has it in both frames
    assert e["vanished"] == 0.5 and e["recorded_present"] == 2
    assert e["copy_first_median_px"] == 3.0  # median of 0 and 6
    assert block_errors(imagined, recorded, first, "blue")["vanished"] is None  # no blue block


def grey_episode(t_len: int) -> Episode:
    """Frame t a uniform grey of level 5 t (no block), t = 0..t_len."""
    frames = np.stack([np.full((SIZE, SIZE, 3), 5 * t, np.uint8) for t in range(t_len + 1)])
    return Episode(frames, np.zeros((t_len, 7), np.float32), np.zeros(t_len + 1, bool), "task")


def test_chunk_rows_and_the_baselines():
    """T = 12: chunk 1 scores frame 8, chunk 2 frame min(16, 12) = 12. PSNR of uniform frames
    d apart = 20 log10(255 / d)."""
    ep = grey_episode(12)
    imagined = np.concatenate([ep.frames, np.repeat(ep.frames[-1:], 4, 0)])[None]  # perfect
    r1, r2 = chunk_row(1, imagined, [ep]), chunk_row(2, imagined, [ep])
    assert (r1["frame"], r2["frame"]) == (8, 16)
    assert r1["psnr"] == r2["psnr"] == 100.0 and r1["ssim"] == pytest.approx(1.0)
    assert r1["copy_first_psnr"] == pytest.approx(20 * math.log10(255 / 40), abs=1e-3)
    assert r1["copy_last_true_psnr"] == r1["copy_first_psnr"]  # the previous chunk's end is 0
    assert r2["copy_first_psnr"] == pytest.approx(20 * math.log10(255 / 60), abs=1e-3)
    assert r2["copy_last_true_psnr"] == pytest.approx(20 * math.log10(255 / 20), abs=1e-3)
    assert r1["blocks"]["red"]["recorded_present"] == 0


def test_report_of_a_tiny_world_model(tmp_path, capsys):
    """Two episodes of 12 and 5 actions, a pushed red square: 2 chunks, every row filled, the
    reward's verdicts, the figure, and a --out holding a user's file refused before work."""
    from wmrl.rewards.resnet import build_classifier, save_checkpoint

    tiny_world_model().save_pretrained(tmp_path / "wm")
    rcfg = {"widths": [4, 4, 4, 4], "blocks_per_stage": 1, "image_size": [SIZE, SIZE]}
    save_checkpoint(build_classifier("resnet", rcfg), {"arch": "resnet", **rcfg},
                    tmp_path / "reward")
    with TrajectoryWriter(tmp_path / "eps", (SIZE, SIZE), ["push"]) as w:
        for t_len, y in ((12, 4), (5, 20)):
            frames = np.stack([square(y, 2 + 2 * t) for t in range(t_len + 1)])
            rng = np.random.default_rng(t_len)
            w.add(Episode(frames, rng.uniform(-1, 1, (t_len, 7)).astype(np.float32),
                          np.arange(t_len + 1) == t_len, "push"))

    out = tmp_path / "report"
    report = run_report(tmp_path / "wm", tmp_path / "eps", out, reward=tmp_path / "reward",
                        num_inference_steps=1, success_threshold=0.5)
    saved = json.loads((out / "report.json").read_text())
    assert saved["n_episodes"] == 2 and saved["n_chunks"] == 2
    assert [r["chunk"] for r in saved["chunks"]] == [1, 2]
    for r in saved["chunks"]:
        assert 0 < r["psnr"] <= 100 and -1 <= r["ssim"] <= 1
        assert r["blocks"]["red"]["recorded_present"] == 2
        assert 0 <= r["blocks"]["red"]["vanished"] <= 1
    verdict = saved["reward"]
    assert verdict["tp"] + verdict["fp"] + verdict["tn"] + verdict["fn"] == 2
    assert 0 <= verdict["balanced_accuracy"] <= 1 and verdict["threshold"] == 0.5
    assert report["chunks"] == saved["chunks"]
    assert (out / "report.png").stat().st_size > 0
    assert capsys.readouterr().out.count("chunk ") == 2  # one line per chunk

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="--out"):
        run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    with pytest.raises(ConfigError, match="WORLD_MODEL="):
        run_report(tmp_path / "eps", tmp_path / "eps", tmp_path / "new")
    with pytest.raises(ConfigError, match="EPISODES="):
        run_report(tmp_path / "wm", tmp_path / "wm", tmp_path / "new")
    with pytest.raises(ConfigError, match="--reward="):
        run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "new", reward=tmp_path / "eps")


def test_lerobot_episodes_are_read_as_trajectories(tmp_path):
    """A LeRobot episode of T rows: T frames, its first T - 1 actions, ``next.success`` of row
    t on frame t + 1."""
    from tests.tiny_models import pushed_square
    from wmrl.eval.wm_fidelity import load_episodes
    from wmrl.lerobot.writer import write_lerobot

    write_lerobot(tmp_path / "ds", (pushed_square(i, 9, successes=2) for i in range(2)), fps=10)
    eps = load_episodes(tmp_path / "ds", max_episodes=1)
    assert len(eps) == 1
    ep = eps[0]
    assert ep.frames.shape == (9, SIZE, SIZE, 3) and ep.actions.shape == (8, 7)
    assert ep.success_labels.tolist() == [False] * 8 + [True]  # rows 7, 8 succeed; 8's unseen
    ep.validate()
