"""Distributed tracing: spans buffered per process, merged into one Chrome trace per run.

Every process (trainer ranks, Ray actors) records spans into an in-memory buffer - no remote
call per event - and hands them over once per step: ``Tracer.flush()`` returns them as
Trace Event Format dicts (the caller returns them to the driver with its step result), or
``Tracer.dump(run_dir)`` appends them to ``run_dir/trace-<host>-<pid>.jsonl``. The driver
``Tracer.merge(sources, path)`` writes one JSON that Perfetto and chrome://tracing open.

Events are complete ``X`` events (``ts``/``dur`` in microseconds) plus ``M`` metadata
(``process_name``, ``thread_name``). One clock for all processes: each process measures
``offset = time_ns() - perf_counter_ns()`` once and stamps ``perf_counter_ns() + offset``,
i.e. wall-clock time that is monotonic inside the process, so a child span always nests in
its parent and processes on synchronised hosts line up.

Spans in asyncio tasks go to per-thread "lanes" (extra tracks): a task takes the lowest free
lane for the duration of its outermost span, so concurrent coroutines never overlap
partially on one track.

Disabled (the default; config ``tracing.enabled``, env ``WMRL_TRACING=1``): a span is one
module-flag check returning a shared no-op context manager.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from wmrl.io.atomic import atomic_path

_ENABLED = os.environ.get("WMRL_TRACING", "0").lower() in ("1", "true", "yes")
_now = time.perf_counter_ns
_OFFSET_NS = time.time_ns() - _now()
_BUFFER: deque = deque(maxlen=1_000_000)  # (name, t0_ns, t1_ns, tid, args) - oldest dropped
_STATE: dict[str, Any] = {"pid": os.getpid(), "process_name": None}
_THREAD_NAMES: dict[int, str] = {}
_LANES: dict[int, list] = {}  # id(task) -> [tid, depth]
_FREE_LANES: dict[int, list[int]] = {}  # native thread id -> released lane numbers
_NEXT_LANE: dict[int, int] = {}
_LANE_LOCK = threading.Lock()
_get_loop = asyncio._get_running_loop  # C fast path: None outside a running loop


def _thread_tid() -> int:
    tid = threading.get_native_id()
    if tid not in _THREAD_NAMES:
        _THREAD_NAMES[tid] = threading.current_thread().name
    return tid


def _enter_tid() -> tuple[int, Any]:
    """Track id for a span starting now, and the asyncio task holding a lane (or None)."""
    loop = _get_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    if task is None:
        return _thread_tid(), None
    lane = _LANES.get(id(task))
    if lane is None:
        native = _thread_tid()
        with _LANE_LOCK:
            free = _FREE_LANES.setdefault(native, [])
            n = min(free) if free else _NEXT_LANE.get(native, 0) + 1
            if free:
                free.remove(n)
            else:
                _NEXT_LANE[native] = n
        tid = native | (n << 22)  # Linux thread ids are < 2**22: stays a distinct int32
        _THREAD_NAMES.setdefault(tid, f"{_THREAD_NAMES[native]} async-{n}")
        lane = _LANES[id(task)] = [tid, 0]
    lane[1] += 1
    return lane[0], task


def _exit_task(task: Any) -> None:
    lane = _LANES[id(task)]
    lane[1] -= 1
    if lane[1] == 0:
        del _LANES[id(task)]
        native, n = lane[0] & ((1 << 22) - 1), lane[0] >> 22
        with _LANE_LOCK:
            _FREE_LANES[native].append(n)


class _Span:
    __slots__ = ("name", "args", "t0", "tid", "task")

    def __init__(self, name: str, args: dict):
        self.name, self.args = name, args

    def __enter__(self):
        self.tid, self.task = _enter_tid()
        self.t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        t1 = _now()
        if exc_type is not None:
            self.args = {**self.args, "error": exc_type.__name__}
        _BUFFER.append((self.name, self.t0, t1, self.tid, self.args))
        if self.task is not None:
            _exit_task(self.task)
        return False


class _NoSpan:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_SPAN = _NoSpan()


class Tracer:
    """Process-wide tracer; all methods are static (one buffer per process)."""

    @staticmethod
    def configure(enabled: bool = True, process_name: str | None = None,
                  max_events: int = 1_000_000) -> None:
        """Switch tracing on/off in this process and name it (e.g. "trainer", "env")."""
        global _ENABLED, _BUFFER
        _ENABLED = bool(enabled)
        if process_name is not None:
            _STATE["process_name"] = process_name
        if max_events != _BUFFER.maxlen:
            _BUFFER = deque(_BUFFER, maxlen=max_events)

    @staticmethod
    def enabled() -> bool:
        return _ENABLED

    @staticmethod
    def trace_span(name: str, **args: Any):
        """``with Tracer.trace_span("denoise", step=3): ...`` - one X event when enabled."""
        if not _ENABLED:
            return _NO_SPAN
        return _Span(name, args)

    @staticmethod
    def trace_func(fn: Callable | None = None, *, name: str | None = None):
        """Decorator for sync and async functions: ``@Tracer.trace_func`` or
        ``@Tracer.trace_func(name="env.step")``; the flag is checked per call."""

        def wrap(f: Callable) -> Callable:
            label = name or f.__qualname__
            if inspect.iscoroutinefunction(f):

                @functools.wraps(f)
                async def traced_async(*a, **kw):
                    if not _ENABLED:
                        return await f(*a, **kw)
                    with _Span(label, {}):
                        return await f(*a, **kw)

                return traced_async

            @functools.wraps(f)
            def traced(*a, **kw):
                if not _ENABLED:
                    return f(*a, **kw)
                with _Span(label, {}):
                    return f(*a, **kw)

            return traced

        return wrap(fn) if fn is not None else wrap

    @staticmethod
    def flush() -> list[dict]:
        """This process's events since the last flush (then forgotten), with metadata."""
        pid = os.getpid()
        if pid != _STATE["pid"]:  # forked child: the parent's events are not ours
            _STATE["pid"] = pid
            _BUFFER.clear()
            _THREAD_NAMES.clear()
        raw = [_BUFFER.popleft() for _ in range(len(_BUFFER))]
        if not raw:
            return []
        pname = _STATE["process_name"] or f"{socket.gethostname()}:{pid}"
        out: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"name": pname}}]
        for tid in sorted({r[3] for r in raw}):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": _THREAD_NAMES.get(tid, str(tid))}})
        for name, t0, t1, tid, args in raw:
            ev = {"name": name, "cat": "wmrl", "ph": "X", "ts": (t0 + _OFFSET_NS) / 1000,
                  "dur": (t1 - t0) / 1000, "pid": pid, "tid": tid}
            if args:
                ev["args"] = args
            out.append(ev)
        return out

    @staticmethod
    def dump(run_dir: str | os.PathLike) -> Path | None:
        """Append ``flush()`` to ``run_dir/trace-<host>-<pid>.jsonl`` (one line per event)."""
        events = Tracer.flush()
        if not events:
            return None
        path = Path(run_dir) / f"trace-{socket.gethostname()}-{os.getpid()}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write("".join(json.dumps(e, default=str) + "\n" for e in events))
        return path

    @staticmethod
    def merge(sources: Iterable[Any], path: str | os.PathLike) -> Path:
        """Write one Chrome-trace JSON from event lists and/or run dirs of ``.jsonl`` files
        (metadata de-duplicated, spans sorted by time). Atomic: temp file then replace."""
        events: list[dict] = []
        for src in sources:
            if isinstance(src, (str, os.PathLike)):
                for f in sorted(Path(src).glob("trace-*.jsonl")):
                    events += [json.loads(line) for line in f.read_text().splitlines() if line]
            else:
                events += list(src)
        meta = {(e["name"], e["pid"], e["tid"]): e for e in events if e.get("ph") == "M"}
        spans = sorted((e for e in events if e.get("ph") != "M"), key=lambda e: e["ts"])
        path = Path(path)
        with atomic_path(path) as tmp, open(tmp, "w") as f:
            json.dump({"traceEvents": list(meta.values()) + spans,
                       "displayTimeUnit": "ms"}, f, default=str)
        return path


trace_span = Tracer.trace_span
trace_func = Tracer.trace_func
