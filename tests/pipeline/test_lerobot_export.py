"""Our demonstrations as a LeRobot dataset (wmrl/pipeline/lerobot_export.py, which
scripts/export_lerobot.py calls): real tabletop episodes exported in both layouts and read back
with wmrl's LeRobot reader (same episodes, rows, actions, success, tasks, state; frames through
the codec), then on through the importer (wmrl/pipeline/lerobot_reset.py) to reset states; bad
inputs refused."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wmrl.envs.initial_states import load_initial_states
from wmrl.errors import ConfigError
from wmrl.lerobot.dataset import LeRobotDataset
from wmrl.pipeline.lerobot_export import ACTION_NAMES, export_lerobot, lerobot_rows, state_names
from wmrl.pipeline.lerobot_reset import import_lerobot
from wmrl.sim.dataset import Episode, TrajectoryDataset, TrajectoryWriter
from wmrl.sim.episodes import EpisodeSpec, rollout_episodes
from wmrl.sim.expert import ScriptedExpert
from wmrl.sim.tabletop import STATE_DIM, TabletopVecEnv, task_by_name

ROOT = Path(__file__).resolve().parents[2]
SIZE = 64  # at 32x32 h264's chroma blurs the small blocks (~11 grey levels a pixel)


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """Three scripted-expert episodes of two tasks (a second or so), each ending in success."""
    root = tmp_path_factory.mktemp("demos") / "data"
    names = ["red_on_plate", "red_left", "red_on_plate"]
    vec = TabletopVecEnv(2, image_size=SIZE, max_episode_steps=64, control_dt=0.05)
    try:
        with TrajectoryWriter(root, (SIZE, SIZE), [task_by_name(n).instruction for n in names],
                              state_dim=STATE_DIM, extra_meta={"env": {"control_dt": 0.05}}) as w:
            for ep in rollout_episodes(vec, ScriptedExpert(),
                                       [EpisodeSpec(n, seed=i) for i, n in enumerate(names)]):
                w.add(ep)
    finally:
        vec.close()
    return root


def test_rows_keep_every_frame_and_repeat_the_last_action():
    ep = Episode(frames=np.zeros((4, 8, 8, 3), np.uint8),
                 actions=np.arange(21, dtype=np.float32).reshape(3, 7),
                 success_labels=np.array([0, 0, 1, 1], bool), task="t")
    frames, actions, task, success, state = lerobot_rows(ep, 0)
    assert len(frames) == len(actions) == len(success) == 4 and state is None
    assert actions[:3].tolist() == ep.actions.tolist() and actions[3].tolist() == ep.actions[2].tolist()
    # next.success: the outcome of the row's action (frame t + 1's label); the last row its own
    assert success.tolist() == [False, True, True, True] and task == "t"
    assert len(state_names()) == STATE_DIM and state_names()[:2] == ["hand_pos_0", "hand_pos_1"]


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_export_reads_back_and_gives_reset_states(demos, tmp_path, version):
    out = tmp_path / "lerobot"
    info = export_lerobot(demos, out, version=version)
    ours = TrajectoryDataset(demos)
    assert (info["episodes"], info["frames"], info["path"]) == (
        3, sum(len(e) + 1 for e in ours), str(out))
    assert info["fps"] == 20  # the control rate the dataset records, 1 / 0.05
    lr = LeRobotDataset(out)
    assert (lr.version, lr.fps, lr.num_episodes, lr.action_dim) == (version, 20, 3, 7)
    assert lr.features["action"]["names"] == ACTION_NAMES
    assert lr.features["observation.state"]["names"] == state_names()
    for a, b in zip(ours, lr.episodes(), strict=True):
        assert len(b) == len(a) + 1 and b.task == a.task
        np.testing.assert_array_equal(b.actions[:-1], a.actions)
        np.testing.assert_array_equal(b.actions[-1], a.actions[-1])
        np.testing.assert_array_equal(b.success[:-1], a.success_labels[1:])  # next.success
        assert b.success[-1] == a.success_labels[-1]
        np.testing.assert_array_equal(b.state, a.states)
        assert a.success_labels[-1]  # the expert's success frame is kept
        err = np.abs(b.frames.astype(np.int16) - a.frames).mean(axis=(1, 2, 3))
        assert b.frames.shape == a.frames.shape and err.max() < 10, err
    # and on to reset states: one per episode, its anchor the episode's first frame
    states = tmp_path / "states"
    assert import_lerobot(out, states)["states"] == 3
    init = load_initial_states(states / "initial_states")
    assert init.tasks == [e.task for e in ours]
    for anchor, ep in zip(init.frames.numpy(), ours, strict=True):
        assert np.abs(anchor.astype(np.int16) - ep.frames[0]).mean() < 10


def test_bad_inputs_are_refused_in_one_line_with_nothing_written(demos, tmp_path):
    out = tmp_path / "out"

    def refused(src: Path, says: str, **kwargs) -> None:
        with pytest.raises(ConfigError) as err:
            export_lerobot(src, out, **kwargs)
        assert says in str(err.value) and "\n" not in str(err.value), err.value

    refused(tmp_path / "nope", "not a trajectory dataset")
    (tmp_path / "empty").mkdir()
    with TrajectoryWriter(tmp_path / "empty", (SIZE, SIZE), ["t"]):
        pass
    refused(tmp_path / "empty", "no episodes")
    refused(demos, "camera_key", camera_key="a/b")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    out.mkdir()
    (out / "keep").write_text("mine")
    refused(demos, f"--out={out} holds files wmrl's lerobot_dataset did not write (keep): pick "
            "a new or empty folder, or pass --force")
    assert [p.name for p in out.iterdir()] == ["keep"]
    export_lerobot(demos, out, force=True)
    assert not (out / "keep").exists() and (out / "meta" / "info.json").is_file()
    export_lerobot(demos, out)  # an earlier export: replaced
    # as a user runs the script: the refusal is one line, exit code 2
    res = subprocess.run([sys.executable, "scripts/export_lerobot.py", str(tmp_path / "nope"),
                          "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.strip().startswith("export_lerobot: ")
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
