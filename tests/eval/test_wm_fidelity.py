"""The fidelity report's metrics on hand-made frames, and reports of a tiny random world
model on two tiny episodes (MuJoCo only to read the camera of a dataset that names one)."""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.tiny_models import tiny_world_model
from wmrl.errors import ConfigError
from wmrl.eval.wm_fidelity import (
    MERGE_PX,
    block_centres,
    block_errors,
    chunk_row,
    fidelity_report,
    merged_share,
    recorded_camera,
    run_report,
)
from wmrl.sim.camera import PinholeCamera
from wmrl.sim.dataset import Episode, TrajectoryWriter
from wmrl.sim.tasks import STATE_DIM, STATE_SLICES

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
    assert e["state_median_px"] is None and e["recorded_state_mean_px"] is None  # no state
    assert e["vanished_pre_success"] == 0.5 and e["vanished_post_success"] is None


def test_vanishing_split_at_the_success_and_errors_against_the_state():
    """Episode 1 vanished after its recorded success, episode 0 kept its block before it; the
    state puts both blocks 1 px right of the recorded squares' centres, a NaN (behind the
    camera) counts nowhere."""
    recorded = np.stack([square(4, 10), square(16, 16)])
    imagined = np.stack([square(4, 13), np.full((SIZE, SIZE, 3), GREY, np.uint8)])
    state = np.array([[5.5, 12.5], [17.5, 18.5]])
    e = block_errors(imagined, recorded, recorded, "red", state, np.array([False, True]))
    assert (e["vanished_pre_success"], e["vanished_post_success"]) == (0.0, 1.0)
    assert (e["present_pre_success"], e["present_post_success"]) == (1, 1)
    assert e["state_median_px"] == e["state_mean_px"] == 2.0  # col 14.5 vs 12.5
    assert e["recorded_state_median_px"] == e["recorded_state_mean_px"] == 1.0
    state[0] = np.nan
    e = block_errors(imagined, recorded, recorded, "red", state)
    assert e["state_median_px"] is None and e["recorded_state_mean_px"] == 1.0


def two_blocks(red, blue, side: int = 4) -> np.ndarray:
    """A grey frame with a red and a blue square (top-left pixels ``red``, ``blue``; None:
    absent); the blue one painted last."""
    f = np.full((SIZE, SIZE, 3), GREY, np.uint8)
    for corner, colour in ((red, (220, 40, 40)), (blue, (30, 40, 200))):
        if corner is not None:
            f[corner[0]:corner[0] + side, corner[1]:corner[1] + side] = colour
    return f


def test_merged_blocks():
    """Recorded: red and blue 12 px apart (>= MERGE_PX = 10) in episodes 0-3, 4 px apart in
    episode 4 (not counted). Imagined: 0 both 3.5 px apart (< 5: merged), 1 both where they
    were, 2 blue gone and red grown to 4 x 6 = 24 px >= 16 + 16 / 2 (merged), 3 blue gone
    and red unchanged (vanished, not merged)."""
    assert MERGE_PX == 10
    apart, near = two_blocks((10, 4), (10, 16)), two_blocks((10, 4), (10, 8))
    recorded = np.stack([apart] * 4 + [near])
    grown = two_blocks(None, None)
    grown[10:14, 4:10] = (220, 40, 40)
    imagined = np.stack([two_blocks((10, 8), (10, 11)), apart, grown,
                         two_blocks((10, 4), None), two_blocks((10, 4), (10, 5))])
    assert merged_share(imagined, recorded) == (0.5, 4)
    assert merged_share(imagined[4:], recorded[4:]) == (None, 0)


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


# a camera at the origin looking down -z with fovy 90°: f = SIZE / 2 px, so the world point
# (x, y, -1) lands on (row, col) = (15.5 - 16 y, 15.5 + 16 x) (wmrl.sim.camera's doc)
HAND_CAMERA = PinholeCamera(np.zeros(3), np.eye(3), 90.0, SIZE, SIZE)


def pushed_square_episodes(tmp_path, env_meta: dict | None = None) -> list[Episode]:
    """Two episodes of 12 and 5 actions, a red square pushed 2 px right per step, succeeding
    on their last frame, written as a trajectory dataset ``tmp_path / "eps"``; their states put
    the red block where HAND_CAMERA sees the square's centre (the blue one behind it)."""
    eps = []
    for t_len, y in ((12, 4), (5, 20)):
        frames = np.stack([square(y, 2 + 2 * t) for t in range(t_len + 1)])
        states = np.zeros((t_len + 1, STATE_DIM), np.float32)
        states[:, STATE_SLICES["red_pos"]] = [[(2 * t - 12) / 16, (14 - y) / 16, -1]
                                              for t in range(t_len + 1)]
        states[:, STATE_SLICES["blue_pos"]] = [0, 0, 1]
        rng = np.random.default_rng(t_len)
        eps.append(Episode(frames, rng.uniform(-1, 1, (t_len, 7)).astype(np.float32),
                           np.arange(t_len + 1) == t_len, "push", states))
    extra = None if env_meta is None else {"env": env_meta}
    with TrajectoryWriter(tmp_path / "eps", (SIZE, SIZE), ["push"], STATE_DIM,
                          extra_meta=extra) as w:
        for ep in eps:
            w.add(ep)
    return eps


def test_report_of_a_tiny_world_model(tmp_path, capsys):
    """2 chunks, every row filled, the reward's verdicts, the figure, the first successes, no
    state figures for a dataset that names no camera, and a --out holding a user's file
    refused before work."""
    from wmrl.rewards.resnet import build_classifier, save_checkpoint

    tiny_world_model().save_pretrained(tmp_path / "wm")
    rcfg = {"widths": [4, 4, 4, 4], "blocks_per_stage": 1, "image_size": [SIZE, SIZE]}
    save_checkpoint(build_classifier("resnet", rcfg), {"arch": "resnet", **rcfg},
                    tmp_path / "reward")
    pushed_square_episodes(tmp_path)

    out = tmp_path / "report"
    report = run_report(tmp_path / "wm", tmp_path / "eps", out, reward=tmp_path / "reward",
                        num_inference_steps=1, success_threshold=0.5)
    saved = json.loads((out / "report.json").read_text())
    assert saved["n_episodes"] == 2 and saved["n_chunks"] == 2
    assert [r["chunk"] for r in saved["chunks"]] == [1, 2]
    assert saved["first_success_step"] == [12, 5] and saved["state_figures"] is False
    for r in saved["chunks"]:
        assert 0 < r["psnr"] <= 100 and -1 <= r["ssim"] <= 1
        assert r["blocks"]["red"]["recorded_present"] == 2
        assert 0 <= r["blocks"]["red"]["vanished"] <= 1
        assert r["blocks"]["red"]["state_median_px"] is None
        assert (r["merged"], r["merge_candidates"]) == (None, 0)  # never a blue block
    # chunk 1 scores frames 8 and 5: episode 1 is at its success; chunk 2 both are
    red = [r["blocks"]["red"] for r in saved["chunks"]]
    assert [(b["present_pre_success"], b["present_post_success"]) for b in red] == [(1, 1),
                                                                                  (0, 2)]
    verdict = saved["reward"]
    assert verdict["tp"] + verdict["fp"] + verdict["tn"] + verdict["fn"] == 2
    assert 0 <= verdict["balanced_accuracy"] <= 1 and verdict["threshold"] == 0.5
    assert report["chunks"] == saved["chunks"]
    assert (out / "report.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert printed.count("chunk ") == 2 and printed.count("merged n/a") == 2  # a line a chunk
    assert "no block positions from the state" in printed

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
    with pytest.raises(ConfigError, match="--device=gpu"):
        run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "new", device="gpu")
    with pytest.raises(ConfigError, match="--context-noise=-0.1 must be >= 0"):
        run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "new", context_noise_sigma=-0.1)
    # noise on the condition latents: recorded, and other imagined frames than without it
    noisy = run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "noisy",
                       num_inference_steps=1, success_threshold=0.5, context_noise_sigma=0.5)
    assert noisy["context_noise_sigma"] == 0.5 and saved["context_noise_sigma"] == 0.0
    assert noisy["chunks"][1]["psnr"] != saved["chunks"][1]["psnr"]


def test_the_report_runs_on_an_imported_wovr_model(tmp_path):
    """A WoVR release at a tiny size, imported as a user imports WoVR's (``import_dit``,
    ``import_vae``): a DiT in the release's key layout (random values, 4 latent channels) and
    Wan2.2's own VAE code's tiny checkpoint (tests/fixtures/rlinf/wan22_vae_tiny.pth, 16x
    spatial, 4 channels). The report replays episodes through it like any world model."""
    import torch
    from safetensors.torch import load_file, save_file

    from wmrl.pipeline.rlinf.dit import import_dit, release_dit_shapes
    from wmrl.pipeline.rlinf.vae import import_vae

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "rlinf"
    g = torch.Generator().manual_seed(0)
    shapes = release_dit_shapes(dim=32, ffn=48, channels=4, freq_dim=16, layers=2)
    save_file({k: torch.randn(v, generator=g) * 0.2 for k, v in shapes.items()},
              str(tmp_path / "dit.safetensors"))
    import_dit([tmp_path / "dit.safetensors"], tmp_path / "wm", num_heads=2, text_dim=8)
    io = load_file(str(fixtures / "wan22_vae_tiny_io.safetensors"))
    import_vae(fixtures / "wan22_vae_tiny.pth", tmp_path / "wm",
               latents_mean=io["latents_mean"].tolist(), latents_std=io["latents_std"].tolist())
    pushed_square_episodes(tmp_path)
    report = run_report(tmp_path / "wm", tmp_path / "eps", tmp_path / "out",
                        num_inference_steps=1)
    assert report["n_episodes"] == 2 and report["n_chunks"] == 2
    assert all(0 < r["psnr"] <= 100 for r in report["chunks"])
    assert (tmp_path / "out" / "report.json").is_file()


def test_state_figures_through_a_camera(tmp_path):
    """The recorded squares sit exactly where HAND_CAMERA projects the state (0 px); a
    dataset rendered by front_close gets that camera from the scene."""
    eps = pushed_square_episodes(tmp_path, {"camera": "front_close"})
    lines = []
    report, frames = fidelity_report(tiny_world_model(), eps, num_inference_steps=1,
                                     log=lines.append, camera=HAND_CAMERA)
    assert frames.shape == (2, 17, SIZE, SIZE, 3) and report["state_figures"] is True
    for r in report["chunks"]:
        assert r["blocks"]["red"]["recorded_state_median_px"] == pytest.approx(0, abs=1e-6)
        assert r["blocks"]["red"]["recorded_state_mean_px"] == pytest.approx(0, abs=1e-6)
        assert r["blocks"]["blue"]["recorded_state_median_px"] is None  # no blue square
    assert all("vs state" in line for line in lines)
    camera = recorded_camera(tmp_path / "eps", eps)
    assert (camera.fovy, camera.height, camera.width) == (33.0, SIZE, SIZE)
    with pytest.raises(ValueError, match="no privileged states"):
        fidelity_report(tiny_world_model(), [grey_episode(8)], camera=HAND_CAMERA)
    with pytest.raises(ValueError, match="chunk=4"):
        fidelity_report(tiny_world_model(), eps, chunk=4)


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


def test_a_report_on_a_lerobot_dataset_loads_no_mujoco(tmp_path, monkeypatch):
    """No camera in a LeRobot dataset: the whole report runs with MuJoCo unimportable (a
    None in sys.modules makes ``import mujoco`` raise)."""
    from tests.tiny_models import pushed_square
    from wmrl.lerobot.writer import write_lerobot

    write_lerobot(tmp_path / "ds", (pushed_square(i, 9, successes=2) for i in range(2)), fps=10)
    tiny_world_model().save_pretrained(tmp_path / "wm")
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ImportError):
        import mujoco  # noqa: F401
    report = run_report(tmp_path / "wm", tmp_path / "ds", tmp_path / "out",
                        num_inference_steps=1, log=lambda line: None)
    assert report["state_figures"] is False
    assert report["first_success_step"] == [8, 8]  # rows 7, 8 succeed: frame 8 is seen first
