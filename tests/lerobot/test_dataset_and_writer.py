"""LeRobot datasets written in both versions (``wmrl.lerobot.writer``) and read back
(``wmrl.lerobot.dataset``): the published layout, exact actions / state / success / tasks,
frames close to the written ones at the right episode boundaries, streaming, resizing, and one
clear line for each bad dataset."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wmrl.errors import ConfigError
from wmrl.io.atomic import OUTPUT_MARKER
from wmrl.lerobot.dataset import LeRobotDataset, LeRobotEpisode
from wmrl.lerobot.writer import write_lerobot

FPS = 10
CAM = "observation.images.front"
LENGTHS = (5, 8, 12)
TASKS = ("pick up the cube", "open the drawer")
# Each episode its own red/green, and blue = 10 * frame: a wrong slice or an off-by-one frame
# is far outside the codec's error.
COLOURS = ((200, 40), (40, 200), (120, 120))


def episode(i: int, T: int | None = None, size: int = 32):
    T = LENGTHS[i] if T is None else T
    rng = np.random.default_rng(i)
    frames = np.empty((T, size, size, 3), np.uint8)
    frames[..., 0], frames[..., 1] = COLOURS[i]
    frames[..., 2] = (10 * np.arange(T, dtype=np.uint8))[:, None, None]
    actions = rng.normal(size=(T, 7)).astype(np.float32)
    success = np.arange(T) >= T - 2 if i != 1 else np.zeros(T, bool)
    state = rng.normal(size=(T, 9)).astype(np.float32)
    return frames, actions, TASKS[i % 2], success, state


def episodes(n: int = 3):
    for i in range(n):
        yield episode(i)


@pytest.fixture(scope="module", params=["v3.0", "v2.1"])
def written(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param.replace(".", "")) / "ds"
    assert write_lerobot(root, episodes(), FPS, CAM, request.param) == root
    return root


def assert_frames_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == np.uint8
    err = np.abs(got.astype(np.int16) - want.astype(np.int16)).mean(axis=(1, 2, 3))
    assert err.max() < 8, err


# -- the layout LeRobot writes ---------------------------------------------------------------

def test_v30_layout(tmp_path):
    root = write_lerobot(tmp_path / "ds", episodes(), FPS, CAM, "v3.0")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and p.name != OUTPUT_MARKER)  # wmrl's mark, beside LeRobot's
    assert files == ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                     "meta/info.json", "meta/stats.json", "meta/tasks.parquet",
                     f"videos/{CAM}/chunk-000/file-000.mp4"]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == FPS
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 25, 2)
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert {"data_files_size_in_mb", "video_files_size_in_mb", "chunks_size"} <= set(info)
    assert not {"total_chunks", "total_videos"} & set(info)
    video = info["features"][CAM]
    assert (video["dtype"], video["shape"], video["names"]) == ("video", [32, 32, 3],
                                                                ["height", "width", "channels"])
    assert video["info"]["video.codec"] == "h264" and video["info"]["video.pix_fmt"] == "yuv420p"
    assert info["features"]["action"]["shape"] == [7]
    assert info["features"]["next.success"]["dtype"] == "bool"

    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    schema = data.schema
    assert schema.field("action").type == pa.list_(pa.float32(), 7)
    assert schema.field("observation.state").type == pa.list_(pa.float32(), 9)
    assert schema.field("timestamp").type == pa.float32()
    for name in ("frame_index", "episode_index", "index", "task_index"):
        assert schema.field(name).type == pa.int64()
    assert data.column("index").to_pylist() == list(range(25))
    assert data.column("episode_index").to_pylist() == [0] * 5 + [1] * 8 + [2] * 12

    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    key = f"videos/{CAM}"
    assert [e["dataset_from_index"] for e in eps] == [0, 5, 13]
    assert [e["dataset_to_index"] for e in eps] == [5, 13, 25]
    assert [e[f"{key}/from_timestamp"] for e in eps] == [0.0, 0.5, 1.3]
    assert [e[f"{key}/to_timestamp"] for e in eps] == [0.5, 1.3, 2.5]
    assert [e["tasks"] for e in eps] == [[TASKS[0]], [TASKS[1]], [TASKS[0]]]
    assert eps[0]["stats/action/count"] == [5] and len(eps[0]["stats/action/q99"]) == 7
    assert np.array(eps[0][f"stats/{CAM}/mean"]).shape == (3, 1, 1)

    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.column("task").to_pylist() == list(TASKS)
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["action"]["count"] == [25]
    with av.open(str(root / f"videos/{CAM}/chunk-000/file-000.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == 25


def test_v21_layout(tmp_path):
    root = write_lerobot(tmp_path / "ds", episodes(), FPS, CAM, "v2.1")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.is_file() and p.name != OUTPUT_MARKER)  # wmrl's mark, beside LeRobot's
    assert files == [*(f"data/chunk-000/episode_00000{i}.parquet" for i in range(3)),
                     "meta/episodes.jsonl", "meta/episodes_stats.jsonl", "meta/info.json",
                     "meta/tasks.jsonl",
                     *(f"videos/chunk-000/{CAM}/episode_00000{i}.mp4" for i in range(3))]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v2.1"
    assert (info["total_videos"], info["total_chunks"]) == (3, 1)
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    assert not {"data_files_size_in_mb", "video_files_size_in_mb"} & set(info)
    assert info["features"][CAM]["info"]["video.is_depth_map"] is False
    lines = (root / "meta/episodes.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"episode_index": i, "tasks": [TASKS[i % 2]], "length": LENGTHS[i]} for i in range(3)]
    tasks = [json.loads(x) for x in (root / "meta/tasks.jsonl").read_text().splitlines()]
    assert tasks == [{"task_index": 0, "task": TASKS[0]}, {"task_index": 1, "task": TASKS[1]}]
    stats = json.loads((root / "meta/episodes_stats.jsonl").read_text().splitlines()[2])
    assert stats["episode_index"] == 2 and stats["stats"]["action"]["count"] == [12]
    assert "q01" not in stats["stats"]["action"]  # v2.1 had no quantiles
    second = pq.read_table(root / "data/chunk-000/episode_000001.parquet")
    assert second.column("index").to_pylist() == list(range(5, 13))
    assert second.column("frame_index").to_pylist() == list(range(8))


# -- reading it back -------------------------------------------------------------------------

def test_reads_back_what_was_written(written):
    ds = LeRobotDataset(written)
    assert (ds.fps, ds.camera, ds.camera_keys, ds.action_dim) == (FPS, CAM, [CAM], 7)
    assert ds.num_episodes == len(ds) == 3 and ds.tasks == {0: TASKS[0], 1: TASKS[1]}
    stream = ds.episodes()
    assert inspect.isgenerator(stream)
    for i, ep in enumerate(stream):
        frames, actions, task, success, state = episode(i)
        assert isinstance(ep, LeRobotEpisode) and (ep.index, ep.task, len(ep)) == (i, task, len(actions))
        np.testing.assert_array_equal(ep.actions, actions)
        np.testing.assert_array_equal(ep.state, state)
        np.testing.assert_array_equal(ep.success, success)
        assert ep.actions.dtype == ep.state.dtype == np.float32 and ep.success.dtype == bool
        assert_frames_close(ep.frames, frames)
    one = ds.episode(2)  # random access: the last episode alone
    assert_frames_close(one.frames, episode(2)[0])


def test_resize(written):
    ds = LeRobotDataset(written, size=(16, 24))
    ep = ds.episode(1)
    assert ep.frames.shape == (8, 16, 24, 3)
    small = episode(1)[0][:, :16, :24]  # constant frames: resizing keeps the colours
    assert_frames_close(ep.frames, small)
    with pytest.raises(ConfigError, match=r"size=\(16,\) is not allowed"):
        LeRobotDataset(written, size=(16,))


def test_v30_files_split_into_chunks_read_at_the_right_boundaries(tmp_path):
    """Tiny size limits: a new data and video file for each episode, two files a chunk."""
    root = write_lerobot(tmp_path / "ds", episodes(), FPS, CAM, "v3.0", chunks_size=2,
                         data_files_size_in_mb=1e-6, video_files_size_in_mb=1e-6)
    videos = sorted(str(p.relative_to(root / "videos" / CAM)) for p in (root / "videos" / CAM).rglob("*.mp4"))
    assert videos == ["chunk-000/file-000.mp4", "chunk-000/file-001.mp4", "chunk-001/file-000.mp4"]
    assert len(list((root / "data").rglob("*.parquet"))) == 3
    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e[f"videos/{CAM}/from_timestamp"] for e in eps] == [0.0, 0.0, 0.0]
    ds = LeRobotDataset(root)
    for i, ep in enumerate(ds.episodes()):
        assert_frames_close(ep.frames, episode(i)[0])
        np.testing.assert_array_equal(ep.actions, episode(i)[1])


def test_minimal_episodes_and_rewriting_one_version_as_the_other(tmp_path):
    """(frames, actions, task) only: no state, no success; then v2.1 -> v3.0 from the reader's
    episodes themselves."""
    src = write_lerobot(tmp_path / "v21", (episode(i)[:3] for i in range(3)), FPS, CAM, "v2.1")
    ds = LeRobotDataset(src)
    first = ds.episode(0)
    assert first.state is None and first.success is None
    assert "observation.state" not in ds.features and "next.success" not in ds.features
    out = write_lerobot(tmp_path / "v30", ds.episodes(), FPS, "observation.images.top", "v3.0")
    again = LeRobotDataset(out)
    assert again.camera == "observation.images.top" and again.version == "v3.0"
    for i, ep in enumerate(again.episodes()):
        np.testing.assert_array_equal(ep.actions, episode(i)[1])
        assert_frames_close(ep.frames, episode(i)[0])


def test_libsvtav1(tmp_path):
    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV build has no libsvtav1")
    root = write_lerobot(tmp_path / "ds", episodes(2), FPS, CAM, "v3.0", codec="libsvtav1")
    info = json.loads((root / "meta/info.json").read_text())["features"][CAM]["info"]
    assert info["video.codec"] == "av1" and info["video.preset"] == 12
    for i, ep in enumerate(LeRobotDataset(root).episodes()):
        assert_frames_close(ep.frames, episode(i)[0])


# -- bad datasets: one line naming the path or key and what to do ----------------------------

def one_line_error(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        fn(*args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


def copy_with_info(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    info = json.loads((dst / "meta/info.json").read_text())
    for key, value in changes.items():
        if key == "features":
            info["features"] = value(info["features"])
        else:
            info[key] = value
    (dst / "meta/info.json").write_text(json.dumps(info))
    return dst


def test_missing_info(tmp_path):
    msg = one_line_error("meta/info.json is missing", LeRobotDataset, tmp_path)
    assert str(tmp_path) in msg and "meta/, data/ and videos/" in msg


def test_unknown_camera_lists_the_real_ones(written):
    one_line_error(r"camera='observation.images.wrist' is not a video feature .*one of "
                   r"\['observation.images.front'\]", LeRobotDataset, written,
                   camera="observation.images.wrist")


def test_unsupported_version(written, tmp_path):
    bad = copy_with_info(written, tmp_path / "old", codebase_version="v2.0")
    one_line_error(r"codebase_version='v2.0' is not supported: one of \['v2.1', 'v3.0'\]",
                   LeRobotDataset, bad)


def test_no_action_feature(written, tmp_path):
    bad = copy_with_info(written, tmp_path / "noact", features=lambda f: {
        ("actions" if k == "action" else k): v for k, v in f.items()})
    one_line_error(r"no 'action' feature", LeRobotDataset, bad)


def test_action_width_differs_from_info(written, tmp_path):
    bad = copy_with_info(written, tmp_path / "wide", features=lambda f: {
        **f, "action": {**f["action"], "shape": [8]}})
    one_line_error(r"column 'action' has 7 values per row but meta/info.json's "
                   r"features.action.shape is \[8\]", LeRobotDataset, bad)


def test_missing_video_file(written, tmp_path):
    bad = tmp_path / "novideo"
    shutil.copytree(written, bad)
    sorted((bad / "videos").rglob("*.mp4"))[0].unlink()
    one_line_error(r"\.mp4 is missing \(episode 0\)", LeRobotDataset, bad)


def test_video_shorter_than_its_episode(written, tmp_path):
    """Another dataset whose last episode is 4 frames short lends its video: the last
    episode's read names it; the others still read."""
    version = json.loads((written / "meta/info.json").read_text())["codebase_version"]
    short = write_lerobot(tmp_path / "short", (episode(i, LENGTHS[i] - 4 * (i == 2))
                                               for i in range(3)), FPS, CAM, version)
    bad = tmp_path / "bad"
    shutil.copytree(written, bad)
    name = (f"videos/{CAM}/chunk-000/file-000.mp4" if version == "v3.0"
            else f"videos/chunk-000/{CAM}/episode_000002.mp4")
    shutil.copy(short / name, bad / name)
    ds = LeRobotDataset(bad)
    assert_frames_close(ds.episode(1).frames, episode(1)[0])
    msg = one_line_error(r"episode 2: .* has frames for 8 of the episode's 12 rows .*shorter "
                         r"than its episode", ds.episode, 2)
    assert name in msg


def test_undecodable_video(written, tmp_path):
    bad = tmp_path / "garbage"
    shutil.copytree(written, bad)
    path = sorted((bad / "videos").rglob("*.mp4"))[0]
    path.write_bytes(b"not an mp4")
    one_line_error(r"episode 0: .* cannot be decoded", LeRobotDataset(bad).episode, 0)


# -- the writer's own checks -----------------------------------------------------------------

def test_writer_refuses_bad_input_and_leaves_nothing(tmp_path):
    one_line_error("exists: write elsewhere or pass overwrite=True", write_lerobot, tmp_path,
                   episodes(), FPS)
    one_line_error(r"version='v2.0' is not allowed", write_lerobot, tmp_path / "x", episodes(),
                   FPS, version="v2.0")
    one_line_error("episodes is empty", write_lerobot, tmp_path / "x", [], FPS)
    odd = (np.zeros((3, 31, 32, 3), np.uint8), np.zeros((3, 7)), "t")
    one_line_error("needs even sides", write_lerobot, tmp_path / "x", [odd], FPS)

    def mismatched():
        yield episode(0)
        frames, actions, task, success, state = episode(1)
        yield frames, actions[:, :6], task, success, state

    one_line_error(r"episode 1: .* but episode 0 fixed", write_lerobot, tmp_path / "x",
                   mismatched(), FPS)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dataset, no temporary folder
