"""A LeRobot dataset (codebase ``v2.1`` or ``v3.0``) read from a local folder, one episode at a
time, without the ``lerobot`` package: parquet with pyarrow, mp4 with PyAV.

``LeRobotDataset(root, camera=None, size=None)`` checks everything cheap when it is built
(``meta/info.json``, the version, the camera, the action feature and its width in the parquet,
the tasks, the episodes' metadata, that every data and video file exists) and raises
``wmrl.errors.ConfigError`` with one line naming the path or key and what to do. ``episode(i)``
reads the i-th episode, ``episodes()`` yields them one after another (one episode in memory at a
time).

What an episode holds (``LeRobotEpisode``), and from which feature:

- ``actions`` float32 [T, A]: ``action``;
- ``state`` float32 [T, S]: ``observation.state``, None where the dataset has none;
- ``success`` bool [T]: the first of ``next.success`` / ``success`` the dataset records, as
  recorded, else None. LeRobot's evaluation recorder writes ``next.success``: row t's is the
  outcome of row t's action, i.e. the success of frame t + 1, not of frame t;
- ``task``: the text of the episode's first row's ``task_index``;
- ``frames`` uint8 [T, H, W, 3]: the camera's video, decoded with PyAV. Row r is the frame at
  ``from_timestamp + timestamp[r]`` (``from_timestamp`` is 0 in v2.1, where each episode has its
  own mp4; in v3.0 it places the episode inside a file shared by many), within 0.4 frame
  intervals. T is the number of parquet rows (sorted by ``frame_index``); a video with fewer
  frames than rows is an error naming the episode. ``size=(H, W)`` resizes each frame with
  PIL's ``Image.resize(..., BICUBIC)``, whose filter widens with the downscale factor
  (antialiased).

The layout: ``docs/reference/lerobot_format.md``. Cameras stored as PNG inside the parquet
(``"dtype": "image"``) are not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image

from wmrl.errors import ConfigError

VERSIONS = ("v2.1", "v3.0")
ACTION = "action"
STATE = "observation.state"
SUCCESS_KEYS = ("next.success", "success")
INFO = "meta/info.json"
# A row's frame is the decoded frame within this many frame intervals of its time.
TOLERANCE_FRAMES = 0.4


@dataclass
class LeRobotEpisode:
    """One episode: ``index`` is the dataset's ``episode_index``; arrays as in the module doc."""

    index: int
    task: str
    frames: np.ndarray
    actions: np.ndarray
    state: np.ndarray | None
    success: np.ndarray | None

    def __len__(self) -> int:
        return len(self.actions)


def chunk_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after ``(chunk_index, file_index)`` in v3.0's numbering."""
    if file_index == chunks_size - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def vectors(column: pa.ChunkedArray | pa.Array, key: str, where: str) -> np.ndarray:
    """A parquet column of fixed- or variable-length lists (or scalars) -> [T, D] array."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if col.null_count:
        raise ConfigError(f"{where}: column {key!r} has {col.null_count} empty rows: "
                          "re-export the dataset with a value on every frame")
    n = len(col)
    if pa.types.is_fixed_size_list(col.type):
        return np.asarray(col.flatten().to_numpy(zero_copy_only=False)).reshape(n, col.type.list_size)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = np.unique(pc.list_value_length(col).to_numpy(zero_copy_only=False))
        if len(lengths) > 1:
            raise ConfigError(f"{where}: column {key!r} has rows of {lengths.tolist()} values: "
                              "every row needs the same width")
        width = int(lengths[0]) if n else 0
        return np.asarray(col.flatten().to_numpy(zero_copy_only=False)).reshape(n, width)
    return np.asarray(col.to_numpy(zero_copy_only=False)).reshape(n, 1)


def width(field_type: pa.DataType) -> int | None:
    """Values per row of a parquet column's type: fixed lists' size, 1 for scalars, None for
    variable lists (known only once read)."""
    if pa.types.is_fixed_size_list(field_type):
        return field_type.list_size
    if pa.types.is_list(field_type) or pa.types.is_large_list(field_type):
        return None
    return 1


class LeRobotDataset:
    """A local LeRobot dataset (see the module doc). ``camera``: a video feature's key (default:
    the first in ``meta/info.json``); ``size``: (H, W) to resize the frames to."""

    def __init__(self, root: str | Path, camera: str | None = None,
                 size: tuple[int, int] | None = None):
        self.root = Path(root)
        info_path = self.root / INFO
        if not info_path.is_file():
            raise ConfigError(f"{info_path} is missing: give the folder of a LeRobot dataset "
                              "(the one holding meta/, data/ and videos/)")
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{info_path} is not readable JSON ({e}): download the "
                              "dataset's meta/ again") from None
        self.info = info
        self._where = str(info_path)
        version = info.get("codebase_version")
        if version not in VERSIONS:
            raise ConfigError(f"{info_path}: codebase_version={version!r} is not supported: "
                              f"one of {list(VERSIONS)} (convert the dataset with LeRobot's "
                              "convert_dataset_v20_to_v21 / convert_dataset_v21_to_v30)")
        self._version = version
        fps = info.get("fps")
        if not isinstance(fps, (int, float)) or fps <= 0:
            raise ConfigError(f"{info_path}: fps={fps!r} is not allowed: a positive number")
        self._fps = fps
        features = info.get("features")
        if not isinstance(features, dict):
            raise ConfigError(f"{info_path}: no 'features' mapping: the file is not a LeRobot "
                              "info.json")
        self.features = features
        if size is not None:
            ok = (isinstance(size, (tuple, list)) and len(size) == 2
                  and all(isinstance(s, int) and s > 0 for s in size))
            if not ok:
                raise ConfigError(f"size={size!r} is not allowed: (height, width), positive ints")
            size = (int(size[0]), int(size[1]))
        self.size = size

        self._camera_keys = [k for k, f in features.items() if f.get("dtype") == "video"]
        self._camera = self._pick_camera(camera)
        if ACTION not in features:
            raise ConfigError(f"{info_path}: no {ACTION!r} feature (features: {sorted(features)}): "
                              "wmrl needs the robot's actions; name that feature 'action'")
        shape = features[ACTION].get("shape")
        if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int)):
            raise ConfigError(f"{info_path}: features.action.shape={shape!r} is not allowed: "
                              "one dimension, [A]")
        self._action_dim = shape[0]
        self._state = STATE if STATE in features else None
        self._success = next((k for k in SUCCESS_KEYS if k in features), None)
        for key in ("data_path", "video_path"):
            if not isinstance(info.get(key), str):
                raise ConfigError(f"{info_path}: {key}={info.get(key)!r} is not allowed: the "
                                  "file-name template LeRobot writes (see docs/reference/"
                                  "lerobot_format.md)")
        self._chunks_size = int(info.get("chunks_size", 1000))

        self._tasks = self._read_tasks()
        self._episodes = self._read_episodes()
        self._check_files()

    # -- properties ------------------------------------------------------------------------

    @property
    def version(self) -> str:
        return self._version

    @property
    def fps(self) -> float:
        return self._fps

    @property
    def camera_keys(self) -> list[str]:
        return list(self._camera_keys)

    @property
    def camera(self) -> str:
        return self._camera

    @property
    def action_dim(self) -> int:
        return self._action_dim

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    @property
    def tasks(self) -> dict[int, str]:
        """task_index -> task text."""
        return dict(self._tasks)

    def __len__(self) -> int:
        return self.num_episodes

    def __repr__(self) -> str:
        return (f"LeRobotDataset({str(self.root)!r}, {self.version}, {self.num_episodes} "
                f"episodes, camera={self.camera!r}, fps={self.fps})")

    # -- reading ---------------------------------------------------------------------------

    def episodes(self) -> Iterator[LeRobotEpisode]:
        """The episodes in order, read one at a time."""
        for i in range(self.num_episodes):
            yield self.episode(i)

    def episode(self, i: int) -> LeRobotEpisode:
        """The i-th episode (0 <= i < num_episodes) of the metadata's order."""
        if not 0 <= i < self.num_episodes:
            raise IndexError(f"episode {i} is out of range: the dataset has {self.num_episodes}")
        ep = self._episodes[i]
        index = ep["episode_index"]
        table, where = self._rows(ep)
        if table.num_rows != ep["length"]:
            raise ConfigError(f"episode {index}: {where} has {table.num_rows} rows but the "
                              f"episodes metadata says length {ep['length']}: re-export the "
                              "dataset")
        if table.num_rows == 0:
            raise ConfigError(f"episode {index}: {where} has no rows: drop the episode")
        if "frame_index" in table.column_names:
            order = np.argsort(table.column("frame_index").to_numpy(), kind="stable")
            table = table.take(pa.array(order))
        actions = vectors(table.column(ACTION), ACTION, where).astype(np.float32)
        if actions.shape[1] != self.action_dim:
            raise ConfigError(f"episode {index}: {where} has {actions.shape[1]} action values per "
                              f"row but meta/info.json's features.action.shape is "
                              f"[{self.action_dim}]: fix info.json or re-export the dataset")
        state = None
        if self._state and self._state in table.column_names:
            state = vectors(table.column(self._state), self._state, where).astype(np.float32)
        success = None
        if self._success and self._success in table.column_names:
            success = vectors(table.column(self._success), self._success, where)[:, 0].astype(bool)
        if "task_index" in table.column_names:
            task_index = int(table.column("task_index")[0].as_py())
            if task_index not in self._tasks:
                raise ConfigError(f"episode {index}: {where} names task_index {task_index}, "
                                  f"which the tasks file lacks: re-export the dataset's meta/")
            task = self._tasks[task_index]
        else:
            task = ep["tasks"][0] if ep.get("tasks") else ""
        if "timestamp" in table.column_names:
            times = table.column("timestamp").to_numpy().astype(np.float64)
        else:
            times = np.arange(table.num_rows) / self.fps
        frames = self._frames(ep, times)
        return LeRobotEpisode(index=index, task=task, frames=frames, actions=actions,
                              state=state, success=success)

    # -- internals -------------------------------------------------------------------------

    def _pick_camera(self, camera: str | None) -> str:
        if camera is None:
            if not self._camera_keys:
                kinds = {k: f.get("dtype") for k, f in self.features.items()}
                raise ConfigError(f"{self._where}: the dataset has no video feature "
                                  f"(dtype 'video'; features: {kinds}): wmrl reads cameras "
                                  "stored as mp4 only")
            return self._camera_keys[0]
        if camera not in self._camera_keys:
            if self.features.get(camera, {}).get("dtype") == "image":
                raise ConfigError(f"{self._where}: camera={camera!r} is stored as images in the "
                                  "parquet, which wmrl does not read: pick one of the video "
                                  f"cameras {self._camera_keys}")
            raise ConfigError(f"camera={camera!r} is not a video feature of {self.root}: one of "
                              f"{self._camera_keys}")
        return camera

    def _path(self, template_key: str, **fields) -> Path:
        return self.root / self.info[template_key].format(video_key=self._camera, **fields)

    def _read_tasks(self) -> dict[int, str]:
        if self._version == "v2.1":
            path = self.root / "meta/tasks.jsonl"
            rows = self._jsonl(path)
            try:
                return {int(r["task_index"]): str(r["task"]) for r in rows}
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{path}: each line needs 'task_index' and 'task': download "
                                  "the dataset's meta/ again") from None
        path = self.root / "meta/tasks.parquet"
        if not path.is_file():
            raise ConfigError(f"{path} is missing: download the dataset's meta/ again")
        table = pq.read_table(path)
        names = table.column_names
        text = next((c for c in ("task", "__index_level_0__") if c in names), None)
        if text is None:
            raise ConfigError(f"{path}: no 'task' column (columns {names}): download the "
                              "dataset's meta/ again")
        texts = table.column(text).to_pylist()
        indices = (table.column("task_index").to_pylist() if "task_index" in names
                   else list(range(len(texts))))
        return {int(i): str(t) for i, t in zip(indices, texts)}

    def _jsonl(self, path: Path) -> list[dict]:
        if not path.is_file():
            raise ConfigError(f"{path} is missing: download the dataset's meta/ again")
        try:
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except ValueError as e:
            raise ConfigError(f"{path} is not JSON lines ({e}): download the dataset's meta/ "
                              "again") from None

    def _read_episodes(self) -> list[dict]:
        if self._version == "v2.1":
            path = self.root / "meta/episodes.jsonl"
            rows = sorted(self._jsonl(path), key=lambda r: r.get("episode_index", -1))
            for r in rows:
                if not {"episode_index", "length"} <= set(r):
                    raise ConfigError(f"{path}: each line needs 'episode_index' and 'length': "
                                      "download the dataset's meta/ again")
            return [{"episode_index": int(r["episode_index"]), "length": int(r["length"]),
                     "tasks": r.get("tasks") or []} for r in rows]
        files = sorted((self.root / "meta/episodes").glob("*/*.parquet"))
        if not files:
            raise ConfigError(f"{self.root / 'meta/episodes'} has no chunk-*/file-*.parquet: "
                              "download the dataset's meta/ again")
        cam = f"videos/{self._camera}/"
        need = ["episode_index", "length", "data/chunk_index", "data/file_index",
                cam + "chunk_index", cam + "file_index", cam + "from_timestamp"]
        rows = []
        for f in files:
            names = pq.read_schema(f).names
            missing = [c for c in need if c not in names]
            if missing:
                raise ConfigError(f"{f}: the episodes metadata lacks columns {missing}: "
                                  "download the dataset's meta/ again")
            cols = [c for c in names if not c.startswith("stats/")]
            rows += pq.read_table(f, columns=cols).to_pylist()
        rows.sort(key=lambda r: r["episode_index"])
        return [{"episode_index": int(r["episode_index"]), "length": int(r["length"]),
                 "tasks": r.get("tasks") or [],
                 "data": (int(r["data/chunk_index"]), int(r["data/file_index"])),
                 "video": (int(r[cam + "chunk_index"]), int(r[cam + "file_index"])),
                 "from_timestamp": float(r[cam + "from_timestamp"])} for r in rows]

    def _data_path(self, ep: dict) -> Path:
        if self._version == "v2.1":
            i = ep["episode_index"]
            return self._path("data_path", episode_chunk=i // self._chunks_size, episode_index=i)
        chunk, file = ep["data"]
        return self._path("data_path", chunk_index=chunk, file_index=file)

    def _video_path(self, ep: dict) -> Path:
        if self._version == "v2.1":
            i = ep["episode_index"]
            return self._path("video_path", episode_chunk=i // self._chunks_size, episode_index=i)
        chunk, file = ep["video"]
        return self._path("video_path", chunk_index=chunk, file_index=file)

    def _check_files(self) -> None:
        """Every data and video file the episodes name exists; the action column's width (where
        the parquet type fixes it) matches info.json, in the first data file (v2.1: one file per
        episode, the others are checked when read) or every data file (v3.0: a few)."""
        seen = set()
        for ep in self._episodes:
            for path in (self._data_path(ep), self._video_path(ep)):
                if path in seen:
                    continue
                seen.add(path)
                if not path.is_file():
                    raise ConfigError(f"{path} is missing (episode {ep['episode_index']}): "
                                      "download the dataset's data/ and videos/ again")
                if path.suffix == ".parquet" and (self._version == "v3.0" or len(seen) <= 2):
                    schema = pq.read_schema(path)
                    if ACTION not in schema.names:
                        raise ConfigError(f"{path}: no {ACTION!r} column (columns "
                                          f"{schema.names}): re-export the dataset")
                    w = width(schema.field(ACTION).type)
                    if w is not None and w != self.action_dim:
                        raise ConfigError(f"{path}: column 'action' has {w} values per row but "
                                          f"meta/info.json's features.action.shape is "
                                          f"[{self.action_dim}]: fix info.json or re-export "
                                          "the dataset")

    def _rows(self, ep: dict) -> tuple[pa.Table, str]:
        path = self._data_path(ep)
        names = pq.read_schema(path).names
        if ACTION not in names:
            raise ConfigError(f"episode {ep['episode_index']}: {path} has no {ACTION!r} column "
                              f"(columns {names}): re-export the dataset")
        wanted = [ACTION, self._state, self._success, "timestamp", "frame_index", "task_index",
                  "episode_index"]
        cols = [c for c in wanted if c and c in names]
        if self._version == "v2.1":
            return pq.read_table(path, columns=cols), str(path)
        table = pq.read_table(path, columns=cols,
                              filters=[("episode_index", "=", ep["episode_index"])])
        return table, str(path)

    def _frames(self, ep: dict, times: np.ndarray) -> np.ndarray:
        """The camera's frames at ``from_timestamp + times`` (see the module doc)."""
        path = self._video_path(ep)
        index = ep["episode_index"]
        start = ep.get("from_timestamp", 0.0)
        targets = start + times
        tol = TOLERANCE_FRAMES / self.fps
        out: np.ndarray | None = None
        n = 0
        try:
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                if targets[0] - tol > 0:
                    container.seek(int((targets[0] - tol) / stream.time_base), stream=stream,
                                   backward=True, any_frame=False)
                for frame in container.decode(stream):
                    if frame.pts is None:
                        continue
                    t = float(frame.pts * stream.time_base)
                    if t < targets[n] - tol:
                        continue
                    if t > targets[n] + tol:
                        break
                    rgb = self._rgb(frame)
                    if out is None:
                        out = np.empty((len(targets), *rgb.shape), np.uint8)
                    out[n] = rgb
                    n += 1
                    if n == len(targets):
                        break
        except (av.error.FFmpegError, IndexError) as e:
            raise ConfigError(f"episode {index}: {path} cannot be decoded ({e}): download or "
                              "re-encode that video") from None
        if n < len(targets):
            raise ConfigError(f"episode {index}: {path} has frames for {n} of the episode's "
                              f"{len(targets)} rows (none within {tol * 1000:.0f} ms of "
                              f"t={targets[n]:.3f} s): the video is shorter than its episode; "
                              "re-encode it or drop the episode")
        return out

    def _rgb(self, frame: av.VideoFrame) -> np.ndarray:
        if self.size is None:
            return frame.to_ndarray(format="rgb24")
        h, w = self.size
        image = frame.to_image()
        if image.size != (w, h):
            image = image.resize((w, h), Image.Resampling.BICUBIC)
        return np.asarray(image, dtype=np.uint8)
