"""Episodes written as a LeRobot dataset, codebase ``v3.0`` (LeRobot's current format) or
``v2.1``, in the published layout (``docs/reference/lerobot_format.md``): for tests, and to turn
our simulator's demonstrations into a dataset LeRobot (and ``wmrl.lerobot.dataset``) reads.

``write_lerobot(root, episodes, fps, camera_key=..., version=...)`` takes an iterable of episodes,
each ``(frames uint8 [T, H, W, 3], actions [T, A], task str, success bool [T] or None, state
[T, S] or None)`` (the last two may be left off) or an object with those attributes (a
``LeRobotEpisode``, so one dataset can be re-written in the other version). It consumes them one
at a time: each episode's rows are written and its frames encoded as it comes, so only one
episode is in memory. The first episode fixes the features (frame size, action and state
widths, whether success is recorded); every later one must match.

What is written:

- ``meta/info.json``: the version's fields; features ``<camera_key>`` (video, with the ``info``
  block probed from the first mp4: ``video.codec`` is the stream's codec name, e.g. ``h264``),
  ``observation.state`` (if given), ``action``, ``next.success`` (bool, if given; the name
  LeRobot's evaluation recorder uses) and the five default columns.
- parquet rows (snappy): ``action`` / ``observation.state`` as fixed-size float32 lists,
  ``next.success`` bool, ``timestamp`` float32 = frame_index / fps, ``frame_index``,
  ``episode_index``, ``index`` (running over the dataset), ``task_index`` int64.
- video: one mp4 stream, PyAV, ``yuv420p`` (frame sides must be even), ``codec`` ``h264``
  (default: every FFmpeg build decodes it) or ``libsvtav1`` (LeRobot's own default) or ``hevc``,
  GOP ``gop`` (2, LeRobot's default) and ``crf`` (30, likewise); the first frame of every episode
  is forced to a key frame.
- v2.1: ``data/chunk-XXX/episode_XXXXXX.parquet`` and
  ``videos/chunk-XXX/<camera_key>/episode_XXXXXX.mp4`` per episode; ``meta/tasks.jsonl``,
  ``meta/episodes.jsonl``, ``meta/episodes_stats.jsonl`` (min, max, mean, std, count).
- v3.0: ``data/chunk-XXX/file-XXX.parquet`` and ``videos/<camera_key>/chunk-XXX/file-XXX.mp4``
  holding many episodes back to back (a new file once the current one would pass
  ``data_files_size_in_mb`` / ``video_files_size_in_mb``, estimated from its bytes per frame so
  far, as LeRobot does); ``meta/tasks.parquet`` (the task text as the pandas index ``task``, a
  ``task_index`` column), ``meta/episodes/chunk-000/file-000.parquet`` (one row per episode:
  data and video file, frame range, ``from_timestamp`` / ``to_timestamp``, the stats as
  ``stats/<feature>/<stat>``, with the quantiles q01..q99) and ``meta/stats.json``.

Stats: vectors over the episode's frames; the camera per channel in [0, 1], shape [3, 1, 1],
from at most 100 frames evenly spaced and at most ~150 pixels a side (LeRobot samples likewise).

The whole folder is written beside ``root`` and renamed onto it at the end
(``wmrl.io.atomic.atomic_dir``): a failure leaves no half dataset. An existing ``root`` is an error
unless ``overwrite=True``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from av.video.frame import PictureType

from wmrl.errors import ConfigError
from wmrl.io.atomic import atomic_dir
from wmrl.lerobot.dataset import ACTION, STATE, VERSIONS, chunk_file

SUCCESS = "next.success"
CODECS = ("h264", "libsvtav1", "hevc")
DATA_PATH = {"v2.1": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
             "v3.0": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"}
VIDEO_PATH = {"v2.1": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
              "v3.0": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"}
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
MB = 1024 ** 2


def write_lerobot(root: str | Path, episodes: Iterable, fps: int,
                  camera_key: str = "observation.images.front", version: str = "v3.0", *,
                  robot_type: str | None = None, codec: str = "h264", crf: int = 30,
                  gop: int = 2, preset: str | int | None = None,
                  action_names: list[str] | None = None, state_names: list[str] | None = None,
                  chunks_size: int = 1000, data_files_size_in_mb: float = 100,
                  video_files_size_in_mb: float = 200, overwrite: bool = False) -> Path:
    """Write ``episodes`` as a LeRobot dataset at ``root`` (see the module doc); returns root."""
    root = Path(root)
    if version not in VERSIONS:
        raise ConfigError(f"version={version!r} is not allowed: one of {list(VERSIONS)}")
    if isinstance(fps, bool) or not isinstance(fps, int) or fps <= 0:
        raise ConfigError(f"fps={fps!r} is not allowed: a positive int (LeRobot's info.json)")
    if not camera_key or "/" in camera_key:
        raise ConfigError(f"camera_key={camera_key!r} is not allowed: a feature name without "
                          "'/', e.g. observation.images.front")
    if codec not in CODECS:
        raise ConfigError(f"codec={codec!r} is not allowed: one of {list(CODECS)}")
    try:
        av.codec.Codec(codec, "w")
    except Exception:
        have = [c for c in CODECS if _has_encoder(c)]
        raise ConfigError(f"codec={codec!r} has no encoder in this PyAV build: one of {have}") \
            from None
    for name, value in (("chunks_size", chunks_size), ("data_files_size_in_mb",
                        data_files_size_in_mb), ("video_files_size_in_mb", video_files_size_in_mb)):
        if not value > 0:
            raise ConfigError(f"{name}={value!r} is not allowed: must be > 0")
    if root.exists() and not overwrite:
        raise ConfigError(f"{root} exists: write elsewhere or pass overwrite=True")
    options = {"g": str(gop), "crf": str(crf)}
    if codec == "libsvtav1" and preset is None:
        preset = 12  # LeRobot's default for libsvtav1
    if preset is not None:
        options["preset"] = str(preset)
    with atomic_dir(root, "lerobot_dataset", force=overwrite) as tmp:
        writer = _Writer(tmp, fps, camera_key, version, codec, options,
                         dict(robot_type=robot_type, action_names=action_names,
                              state_names=state_names, chunks_size=int(chunks_size),
                              data_mb=data_files_size_in_mb, video_mb=video_files_size_in_mb,
                              gop=gop, crf=crf, preset=preset))
        try:
            for ep in episodes:
                writer.add(*_unpack(ep, writer.count))
            if writer.count == 0:
                raise ConfigError("episodes is empty: write_lerobot needs at least one episode")
            writer.finish()
        finally:
            writer.close()
    return root


def _has_encoder(codec: str) -> bool:
    try:
        av.codec.Codec(codec, "w")
        return True
    except Exception:
        return False


def _unpack(ep, n: int) -> tuple:
    """An episode (tuple or object with the attributes) -> (frames, actions, task, success, state)."""
    if hasattr(ep, "frames") and hasattr(ep, "actions"):
        return (ep.frames, ep.actions, getattr(ep, "task", ""), getattr(ep, "success", None),
                getattr(ep, "state", None))
    ep = tuple(ep)
    if not 3 <= len(ep) <= 5:
        raise ConfigError(f"episode {n}: {len(ep)} items is not allowed: (frames, actions, task"
                          "[, success[, state]])")
    return (*ep, None, None)[:5]


def _stats(x: np.ndarray, quantiles: bool, count: int | None = None) -> dict[str, np.ndarray]:
    """min / max / mean / std (/ quantiles) over axis 0 of ``x`` [N, D], and the count."""
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
           "count": np.array([len(x) if count is None else count])}
    if quantiles:
        out.update({k: np.quantile(x, q, axis=0) for k, q in QUANTILES.items()})
    return out


def _aggregate(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One feature's stats over episodes: count-weighted mean, pooled variance, min of mins, max
    of maxes; quantiles at or below the median take the min over episodes, the others the max
    (LeRobot's ``aggregate_feature_stats``)."""
    counts = np.array([s["count"][0] for s in per_episode], np.float64)
    means = np.stack([s["mean"] for s in per_episode])
    var = np.stack([s["std"] ** 2 for s in per_episode])
    w = counts.reshape(-1, *([1] * (means.ndim - 1)))
    mean = (means * w).sum(0) / counts.sum()
    pooled = ((var + (means - mean) ** 2) * w).sum(0) / counts.sum()
    out = {"min": np.min([s["min"] for s in per_episode], 0),
           "max": np.max([s["max"] for s in per_episode], 0),
           "mean": mean, "std": np.sqrt(pooled), "count": np.array([int(counts.sum())])}
    for k, q in QUANTILES.items():
        if k in per_episode[0]:
            values = np.stack([s[k] for s in per_episode])
            out[k] = values.min(0) if q <= 0.5 else values.max(0)
    return out


def _json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {f: {k: np.asarray(v).tolist() for k, v in s.items()} for f, s in stats.items()}


def _pandas_index_metadata(index: str, column: str) -> bytes:
    """The ``pandas`` schema metadata of a frame with one int64 column and a string index
    named ``index`` (what ``DataFrame.to_parquet`` writes), so pandas reads the index back."""
    return json.dumps({
        "index_columns": [index],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": column, "field_name": column, "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": index, "field_name": index, "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }).encode()


class _Video:
    """One mp4 being written: frames appended with consecutive pts at 1/fps."""

    def __init__(self, path: Path, fps: int, codec: str, options: dict, height: int, width: int):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.time_base = Fraction(1, fps)
        self.container = av.open(str(path), "w")
        self.stream = self.container.add_stream(codec, rate=fps, options=options)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, "yuv420p"
        self.frames = 0
        self.bytes = 0

    def add(self, frames: np.ndarray) -> int:
        """Append an episode (its first frame a key frame); returns its first frame's number."""
        start = self.frames
        for k, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame.pts, frame.time_base = self.frames, self.time_base
            if k == 0:
                frame.pict_type = PictureType.I
            self._mux(self.stream.encode(frame))
            self.frames += 1
        return start

    def _mux(self, packets) -> None:
        for p in packets:
            self.bytes += p.size
            self.container.mux(p)

    def close(self) -> None:
        if self.container is not None:
            try:
                self._mux(self.stream.encode(None))
            finally:
                self.container.close()
                self.container = None


class _Writer:
    """The dataset being written into ``root`` (the temporary folder), one episode at a time."""

    def __init__(self, root: Path, fps: int, camera: str, version: str, codec: str,
                 options: dict, settings: dict):
        self.root, self.fps, self.camera, self.version = root, fps, camera, version
        self.codec, self.options, self.settings = codec, options, settings
        self.count = 0
        self.total_frames = 0
        self.tasks: dict[str, int] = {}
        self.meta_rows: list[dict] = []
        self.episode_stats: list[dict[str, dict]] = []
        self.shape: tuple[int, int] | None = None
        self.action_dim: int | None = None
        self.state_dim: int | None = None
        self.has_success = False
        self.first_video: Path | None = None
        # v3.0: the open data and video files and where they are in the numbering
        self.data_writer: pq.ParquetWriter | None = None
        self.data_sink = None
        self.data_at = (0, 0)
        self.data_frames = 0
        self.video: _Video | None = None
        self.video_at = (0, 0)

    # -- one episode -----------------------------------------------------------------------

    def add(self, frames, actions, task, success, state) -> None:
        n = self.count
        frames, actions, success, state = self._check(n, frames, actions, task, success, state)
        T = len(frames)
        task_index = self.tasks.setdefault(task, len(self.tasks))
        table = self._table(n, actions, success, state, task_index)
        stats = self._episode_stats(table, frames)
        if self.version == "v2.1":
            chunk = n // self.settings["chunks_size"]
            data = self.root / DATA_PATH["v2.1"].format(episode_chunk=chunk, episode_index=n)
            data.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, data, compression="snappy")
            path = self.root / VIDEO_PATH["v2.1"].format(episode_chunk=chunk, video_key=self.camera,
                                                         episode_index=n)
            video = _Video(path, self.fps, self.codec, self.options, *self.shape)
            try:
                video.add(frames)
            finally:
                video.close()
            self.meta_rows.append({"episode_index": n, "tasks": [task], "length": T})
        else:
            self.meta_rows.append(self._add_v3(n, table, frames, task, stats))
        self.first_video = self.first_video or self._video_path(n)
        self.episode_stats.append(stats)
        self.total_frames += T
        self.count += 1

    def _check(self, n, frames, actions, task, success, state):
        frames = np.asarray(frames)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ConfigError(f"episode {n}: frames {frames.dtype} {list(frames.shape)} are not "
                              "allowed: uint8 [T, H, W, 3]")
        T, H, W = frames.shape[:3]
        if T == 0:
            raise ConfigError(f"episode {n} has no frames: drop it")
        if H % 2 or W % 2:
            raise ConfigError(f"episode {n}: frames of {H}x{W} are not allowed: yuv420p video "
                              "needs even sides; crop or pad them")
        actions = np.asarray(actions, dtype=np.float32)
        if actions.ndim != 2 or len(actions) != T:
            raise ConfigError(f"episode {n}: actions {list(actions.shape)} are not allowed: "
                              f"[T={T}, A]")
        if not isinstance(task, str) or not task:
            raise ConfigError(f"episode {n}: task={task!r} is not allowed: the instruction text")
        if success is not None:
            success = np.asarray(success).reshape(-1)
            if len(success) != T:
                raise ConfigError(f"episode {n}: success has {len(success)} values for {T} frames")
            success = success.astype(bool)
        if state is not None:
            state = np.asarray(state, dtype=np.float32)
            if state.ndim != 2 or len(state) != T:
                raise ConfigError(f"episode {n}: state {list(state.shape)} is not allowed: "
                                  f"[T={T}, S]")
        if self.count == 0:
            self.shape = (H, W)
            self.action_dim = actions.shape[1]
            self.state_dim = None if state is None else state.shape[1]
            self.has_success = success is not None
        got = ((H, W), actions.shape[1], None if state is None else state.shape[1],
               success is not None)
        want = (self.shape, self.action_dim, self.state_dim, self.has_success)
        if got != want:
            raise ConfigError(f"episode {n}: (frame size, action width, state width, has "
                              f"success) = {got} but episode 0 fixed {want}: every episode "
                              "needs the same features")
        return frames, actions, success, state

    def _table(self, n, actions, success, state, task_index) -> pa.Table:
        T = len(actions)
        cols = {}
        if state is not None:
            cols[STATE] = pa.FixedSizeListArray.from_arrays(pa.array(state.reshape(-1)),
                                                            state.shape[1])
        cols[ACTION] = pa.FixedSizeListArray.from_arrays(pa.array(actions.reshape(-1)),
                                                         actions.shape[1])
        if success is not None:
            cols[SUCCESS] = pa.array(success, pa.bool_())
        first = self.total_frames
        cols["timestamp"] = pa.array((np.arange(T) / self.fps).astype(np.float32))
        cols["frame_index"] = pa.array(np.arange(T, dtype=np.int64))
        cols["episode_index"] = pa.array(np.full(T, n, np.int64))
        cols["index"] = pa.array(np.arange(first, first + T, dtype=np.int64))
        cols["task_index"] = pa.array(np.full(T, task_index, np.int64))
        return pa.table(cols)

    def _episode_stats(self, table: pa.Table, frames: np.ndarray) -> dict[str, dict]:
        quantiles = self.version == "v3.0"
        stats = {}
        T, H, W = frames.shape[:3]
        pick = np.unique(np.linspace(0, T - 1, min(T, 100)).round().astype(int))
        step = max(1, math.ceil(max(H, W) / 150))
        pixels = frames[pick, ::step, ::step].reshape(-1, 3).astype(np.float64) / 255.0
        cam = _stats(pixels, quantiles, count=len(pick))
        stats[self.camera] = {k: v if k == "count" else v.reshape(3, 1, 1) for k, v in cam.items()}
        for name in table.column_names:
            col = table.column(name).combine_chunks()
            if pa.types.is_fixed_size_list(col.type):
                x = col.flatten().to_numpy().reshape(len(col), col.type.list_size)
            else:
                x = col.to_numpy(zero_copy_only=False).reshape(-1, 1)
            stats[name] = _stats(x.astype(np.float64), quantiles)
        return stats

    def _add_v3(self, n, table, frames, task, stats) -> dict:
        s = self.settings
        T = len(frames)
        if self.data_writer is not None:
            size = self.data_sink.tell()
            if size + size / self.data_frames * T >= s["data_mb"] * MB:
                self._close_data()
                self.data_at = chunk_file(*self.data_at, s["chunks_size"])
        if self.data_writer is None:
            path = self.root / DATA_PATH["v3.0"].format(chunk_index=self.data_at[0],
                                                        file_index=self.data_at[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self.data_sink = pa.OSFile(str(path), "wb")
            self.data_writer = pq.ParquetWriter(self.data_sink, table.schema, compression="snappy")
            self.data_frames = 0
        from_index = self.total_frames
        self.data_writer.write_table(table)
        self.data_frames += T
        if self.video is not None and self.video.frames:
            size = self.video.bytes
            if size + size / self.video.frames * T >= s["video_mb"] * MB:
                self.video.close()
                self.video = None
                self.video_at = chunk_file(*self.video_at, s["chunks_size"])
        if self.video is None:
            path = self.root / VIDEO_PATH["v3.0"].format(video_key=self.camera,
                                                         chunk_index=self.video_at[0],
                                                         file_index=self.video_at[1])
            self.video = _Video(path, self.fps, self.codec, self.options, *self.shape)
        start = self.video.add(frames)
        key = f"videos/{self.camera}"
        row = {"episode_index": n, "tasks": [task], "length": T,
               "data/chunk_index": self.data_at[0], "data/file_index": self.data_at[1],
               "dataset_from_index": from_index, "dataset_to_index": from_index + T,
               f"{key}/chunk_index": self.video_at[0], f"{key}/file_index": self.video_at[1],
               f"{key}/from_timestamp": start / self.fps,
               f"{key}/to_timestamp": (start + T) / self.fps,
               "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        for feature, values in stats.items():
            for stat, v in values.items():
                row[f"stats/{feature}/{stat}"] = np.asarray(v).tolist()
        return row

    def _video_path(self, n: int) -> Path:
        if self.version == "v2.1":
            return self.root / VIDEO_PATH["v2.1"].format(
                episode_chunk=n // self.settings["chunks_size"], video_key=self.camera,
                episode_index=n)
        return self.video.path

    # -- the end ---------------------------------------------------------------------------

    def _close_data(self) -> None:
        if self.data_writer is not None:
            try:
                self.data_writer.close()
            finally:
                self.data_sink.close()
                self.data_writer = self.data_sink = None

    def close(self) -> None:
        """Close any open file (after ``finish`` or on an error)."""
        try:
            self._close_data()
        finally:
            if self.video is not None:
                self.video.close()
                self.video = None

    def finish(self) -> None:
        self.close()
        meta = self.root / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        tasks = sorted(self.tasks.items(), key=lambda kv: kv[1])
        if self.version == "v2.1":
            self._jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": t} for t, i in tasks])
            self._jsonl(meta / "episodes.jsonl", self.meta_rows)
            self._jsonl(meta / "episodes_stats.jsonl",
                        [{"episode_index": n, "stats": _json(s)}
                         for n, s in enumerate(self.episode_stats)])
        else:
            table = pa.table({"task_index": pa.array([i for _, i in tasks], pa.int64()),
                              "task": pa.array([t for t, _ in tasks], pa.string())})
            table = table.replace_schema_metadata(
                {b"pandas": _pandas_index_metadata("task", "task_index")})
            pq.write_table(table, meta / "tasks.parquet")
            path = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(self.meta_rows), path, compression="snappy")
            features = self.episode_stats[0].keys()
            total = {f: _aggregate([s[f] for s in self.episode_stats]) for f in features}
            (meta / "stats.json").write_text(json.dumps(_json(total), indent=4))
        (meta / "info.json").write_text(json.dumps(self._info(), indent=4))

    def _jsonl(self, path: Path, rows: list[dict]) -> None:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def _info(self) -> dict:
        s = self.settings
        H, W = self.shape
        with av.open(str(self.first_video)) as container:
            stream = container.streams.video[0]
            video = {"video.height": stream.height, "video.width": stream.width,
                     "video.codec": stream.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                     "video.fps": int(stream.base_rate), "video.channels": 3,
                     "has_audio": len(container.streams.audio) > 0}
        if self.version == "v2.1":
            video["video.is_depth_map"] = False
        else:
            video.update({"video.g": s["gop"], "video.crf": s["crf"], "video.preset": s["preset"],
                          "video.fast_decode": 0, "video.video_backend": "pyav",
                          "video.extra_options": {}, "is_depth_map": False})
        features = {self.camera: {"dtype": "video", "shape": [H, W, 3],
                                  "names": ["height", "width", "channels"], "info": video}}
        if self.state_dim is not None:
            features[STATE] = {"dtype": "float32", "shape": [self.state_dim],
                               "names": s["state_names"]}
        features[ACTION] = {"dtype": "float32", "shape": [self.action_dim],
                            "names": s["action_names"]}
        if self.has_success:
            features[SUCCESS] = {"dtype": "bool", "shape": [1], "names": None}
        features.update(json.loads(json.dumps(DEFAULT_FEATURES)))
        n = self.count
        info = {"codebase_version": self.version, "robot_type": s["robot_type"],
                "total_episodes": n, "total_frames": self.total_frames,
                "total_tasks": len(self.tasks)}
        if self.version == "v2.1":
            info.update({"total_videos": n, "total_chunks": math.ceil(n / s["chunks_size"]),
                         "chunks_size": s["chunks_size"]})
        else:
            info.update({"chunks_size": s["chunks_size"],
                         "data_files_size_in_mb": s["data_mb"],
                         "video_files_size_in_mb": s["video_mb"]})
        info.update({"fps": self.fps, "splits": {"train": f"0:{n}"},
                     "data_path": DATA_PATH[self.version],
                     "video_path": VIDEO_PATH[self.version], "features": features})
        return info
