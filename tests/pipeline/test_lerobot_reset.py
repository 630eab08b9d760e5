"""Reset states from a LeRobot dataset (wmrl/pipeline/lerobot_reset.py, which
scripts/import_lerobot.py calls): hand-checked states, and a dataset written in the real format
-> initial_states/ and RLinf's dataset/, which RLinf's reader (our importer of it) turns into
the very same states."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from wmrl.envs.initial_states import load_initial_states
from wmrl.errors import ConfigError
from wmrl.lerobot.dataset import LeRobotEpisode
from wmrl.lerobot.writer import write_lerobot
from wmrl.pipeline.lerobot_reset import episode_states, import_lerobot, keyframe
from wmrl.pipeline.rlinf.reset_data import import_reset_data

ROOT = Path(__file__).resolve().parents[2]


def episode(index: int, length: int, task: str = "stack") -> LeRobotEpisode:
    """Frame t is all t * 10 (so a frame names its step); action t is all t."""
    frames = np.stack([np.full((8, 8, 3), 10 * t, np.uint8) for t in range(length)])
    actions = np.stack([np.full(7, t, np.float32) for t in range(length)])
    return LeRobotEpisode(index=index, task=task, frames=frames, actions=actions, state=None,
                          success=None)


def test_a_plain_and_a_keyframe_state_by_hand():
    assert keyframe(10, 0.5) == 4  # round(4.5) = 4
    assert keyframe(10, 0.1) == 3  # late enough for 4 context frames: f0..f3
    plain, kir = episode_states(episode(7, 10), keyframes=[0.5])
    assert plain["name"] == "traj000007.npy" and kir["name"] == "traj000007_k0_kir.npy"
    # plain: f0 in every slot, zero actions with the gripper open (-1)
    assert plain["context_frames"][:, 0, 0, 0].tolist() == [0, 0, 0, 0]
    assert plain["context_actions"].tolist() == [[0, 0, 0, 0, 0, 0, -1]] * 4
    # keyframe 4: frames f1..f4 and their actions; the reference stays f0
    assert kir["anchor"][0, 0, 0] == 0
    assert kir["context_frames"][:, 0, 0, 0].tolist() == [10, 20, 30, 40]
    assert kir["context_actions"][:, 0].tolist() == [1, 2, 3, 4]
    # RLinf's file: frame 0, then the frames ending at the keyframe
    assert [f["image"][0, 0, 0] for f in kir["trajectory"]] == [0, 10, 20, 30, 40]
    assert [f["delta_action"][0] for f in kir["trajectory"]] == [0, 1, 2, 3, 4]
    assert {f["instruction"] for f in kir["trajectory"]} == {"stack"}
    # an episode shorter than one context has no keyframe state
    assert len(episode_states(episode(0, 3), keyframes=[0.5])) == 1


def colour_episodes(n: int = 3, length: int = 12):
    """Episode e: frames of one colour per episode (brightening with t), actions e + t / 10."""
    for e in range(n):
        frames = np.zeros((length, 32, 32, 3), np.uint8)
        for t in range(length):
            frames[t, ..., e % 3] = 60 + 15 * t
        actions = np.stack([np.full(7, e + t / 10, np.float32) for t in range(length)])
        yield frames, actions, ["pick the red block", "stack the cubes"][e % 2], None, None


def test_a_dataset_gives_the_states_rlinfs_reader_gives(tmp_path):
    data = tmp_path / "lerobot"
    write_lerobot(data, colour_episodes(), fps=10)
    out = tmp_path / "out"
    info = import_lerobot(data, out, keyframes=[0.5])
    assert (info["states"], info["kir_states"], info["image"]) == (6, 3, [32, 32, 3])
    ours = load_initial_states(out / "initial_states")
    pick, stack = "pick the red block", "stack the cubes"  # 2 states an episode
    assert ours.tasks == [pick, pick, stack, stack, pick, pick]
    assert sorted(p.name for p in (out / "dataset").glob("traj*"))[:2] == [
        "traj000000.npy", "traj000000_k0_kir.npy"]
    # the keyframe of a 12-frame episode at 0.5 is round(5.5) = 6: context f3..f6
    torch.testing.assert_close(ours.context_actions[1, :, 0],
                               torch.tensor([0.3, 0.4, 0.5, 0.6]))
    # the frames came through the video: episode 1 is green, brightening (lossy codec)
    green = ours.context_frames[3].float().mean(dim=(1, 2))  # [4 frames, 3 channels]
    assert (green[:, 1] - torch.tensor([105.0, 120.0, 135.0, 150.0])).abs().max() < 8
    assert green[:, 0].max() < 10 and green[:, 2].max() < 10
    # RLinf's reader of the dataset/ folder (our importer of it) builds the same states
    theirs = load_initial_states(Path(import_reset_data(out / "dataset", tmp_path / "rlinf")[
        "initial_states"]))
    assert theirs.tasks == ours.tasks
    for name in ("frames", "context_frames", "context_actions"):
        assert torch.equal(getattr(theirs, name), getattr(ours, name)), name


def refused(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        import_lerobot(*args, **kwargs)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_bad_dataset_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "out"
    assert "meta/info.json" in refused(tmp_path / "nope", out)
    assert not out.exists()
    data = tmp_path / "lerobot"
    write_lerobot(data, colour_episodes(1), fps=10)
    assert "wrist" in refused(data, out, camera="wrist") and not out.exists()
    assert "(0, 1]" in refused(data, out, keyframes=[1.5]) and not out.exists()
    assert refused(data, out, size=[0]) == "--size [0]: S or H W, positive"
    # as a user runs the script: the refusal is one line, exit code 2
    res = subprocess.run([sys.executable, "scripts/import_lerobot.py", str(data), "--out",
                          str(out), "--size", "0"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "import_lerobot: --size [0]: S or H W, positive"] and not out.exists()


def test_a_users_files_are_kept_or_refused_an_earlier_import_replaced(tmp_path):
    data, out = tmp_path / "lerobot", tmp_path / "out"
    write_lerobot(data, colour_episodes(1), fps=10)
    (out / "reward").mkdir(parents=True)  # what else --out holds stays (a reward trained there)
    (out / "notes.txt").write_text("mine")
    import_lerobot(data, out)
    assert sorted(p.name for p in out.iterdir()) == ["dataset", "initial_states", "notes.txt",
                                                     "reward"]
    (out / "dataset" / "traj000000.npy").unlink()
    import_lerobot(data, out)  # its own: replaced whole
    assert (out / "dataset" / "traj000000.npy").is_file()
    (out / "initial_states" / "notes.txt").write_text("mine")
    assert refused(data, out) == (
        f"--out={out / 'initial_states'} holds files wmrl's import_lerobot did "
        "not write (notes.txt): pick a new or empty folder, or pass --force to replace it "
        "(everything in it is deleted)")
    assert (out / "initial_states" / "notes.txt").is_file()
    import_lerobot(data, out, force=True)
    assert not (out / "initial_states" / "notes.txt").exists()
