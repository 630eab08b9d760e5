"""Writes that a crash cannot leave half-done: write beside the target, then rename.

``atomic_path(path)`` yields a temporary path in the same directory (same suffix, so writers
that pick a format by extension still work); when the block ends without an error the file is
made readable (0644), flushed to disk and ``os.replace``d onto ``path`` - the old file stays
valid until that instant. On an error the temporary file is removed and ``path`` is untouched.
``atomic_dir(path, writer)`` does the same for a whole directory (a model folder, a set of
shards) and leaves a marker in it, ``.wmrl_output.json`` = ``{"writer": writer}``.

No command deletes what it did not write: ``check_output_dir(path, writer, force)``, called by
each command before any work, refuses a folder that exists and holds anything but an earlier
output of the same writer, unless the user forces it (``--force`` / ``overwrite=true``);
``atomic_dir`` refuses the same folders again before it swaps (defence in depth). The writer is
the kind of folder where several commands write one kind (``world_model``: train_world_model.py,
finetune_world_model.py, export.py --world-model), else the command.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from wmrl.errors import ConfigError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp makes owner-only files
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


OUTPUT_MARKER = ".wmrl_output.json"

# Folders written before the marker existed (the checked-in wmrl/assets/ among them), known by
# a file only that writer makes (first tuple) and every entry matching its layout (second).
# Layouts others publish too (a policy, a LeRobot dataset, a peft adapter) count only with a
# file wmrl alone writes (sft_metrics.json), so a downloaded checkpoint is never taken for one.
EARLIER_LAYOUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "world_model": (("action/action_modules.safetensors",),
                    ("transformer", "vae", "action", "metrics*.json")),
    "import_rlinf": (("action/action_modules.safetensors",),
                     ("transformer", "vae", "action", "initial_states")),
    "initial_states": (("initial_states.safetensors",),
                       ("initial_states.safetensors", "tasks.json", "sources.json")),
    "policy": (("sft_metrics.json",),
               ("config.json", "dataset_statistics.json", "*.safetensors",
                "model.safetensors.index.json", "tokenizer*", "special_tokens_map.json",
                "added_tokens.json", "sft_metrics.json")),
    "reward": (("model.safetensors", "metrics.json"),
               ("model.safetensors", "config.json", "metrics.json",
                "closed_loop_calibration.json")),
    "collect": (("meta.json",), ("meta.json", "episodes-*.safetensors")),
}

_forced: set[Path] = set()  # folders the user said to replace (check_output_dir's force)


def _marker(path: Path) -> dict:
    try:
        marker = json.loads((path / OUTPUT_MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def written_by(path: str | os.PathLike) -> str | None:
    """The writer an output folder names in its marker; None when unmarked or unreadable."""
    return _marker(Path(path)).get("writer")


def mark_output_dir(path: str | os.PathLike, writer: str,
                    entries: list[str] | None = None) -> None:
    """Write the marker into ``path``: ``writer`` and ``entries``, the top-level names it wrote
    (default: all the folder holds). ``atomic_dir`` does it itself; a writer that fills its
    folder file by file calls this once it is done."""
    path = Path(path)
    if entries is None:
        entries = [p.name for p in path.iterdir() if p.name != OUTPUT_MARKER]
    write_text(path / OUTPUT_MARKER, json.dumps({"writer": writer, "entries": sorted(entries)},
                                                indent=1) + "\n")


def _not_written_by(path: Path, writer: str) -> list[str] | None:
    """The entries of the folder ``path`` that ``writer`` did not write (its marker's
    ``entries``, or any in its ``EARLIER_LAYOUTS`` layout: files added after the marker, such
    as metrics.json, and folders from before markers); None when another writer marked it."""
    marker = _marker(path)
    signature, layout = EARLIER_LAYOUTS.get(writer, ((), ()))
    if marker and marker.get("writer") != writer:
        return None
    names = sorted(p.name for p in path.iterdir() if p.name != OUTPUT_MARKER)
    if not marker and not (signature and all((path / f).is_file() for f in signature)):
        return names
    ours = set(marker.get("entries", ()))
    return [n for n in names if n not in ours and not any(fnmatch.fnmatch(n, pat)
                                                           for pat in layout)]


def check_output_dir(path: str | os.PathLike, writer: str, force: bool = False,
                     key: str = "--out", force_flag: str | None = None) -> Path:
    """Refuse, in one line naming ``key``, an output folder this writer may not replace.

    Allowed: no folder, an empty one, an earlier output of ``writer`` (marked by it, or
    unmarked in its ``EARLIER_LAYOUTS``) holding nothing else, or any folder with ``force``
    (remembered for this process, so ``atomic_dir`` on the same path replaces it too). A file
    at ``path`` is always refused. ``force_flag``: how the user forces it (default
    ``--force`` for an argparse ``key``, else ``overwrite=true``)."""
    path = Path(path)
    flag = force_flag or ("--force" if key.startswith("--") else "overwrite=true")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}={path} is a file: give a folder (a new or an empty one)")
    if not path.is_dir() or not any(path.iterdir()):
        return path
    if force:
        _forced.add(path.resolve())
        return path
    foreign = _not_written_by(path, writer)
    if foreign == []:
        return path
    what = (f"is {written_by(path)}'s output, not {writer}'s" if foreign is None else
            f"holds files wmrl's {writer} did not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''})")
    raise ConfigError(f"{key}={path} {what}: pick a new or empty folder, or pass {flag} to "
                      "replace it (everything in it is deleted)")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, writer: str | None = None,
               force: bool = False) -> Iterator[Path]:
    """A directory written whole or not at all: yields an empty temporary directory beside
    ``path``; when the block ends without an error the marker naming ``writer`` is written
    into it, the old ``path`` (if any) is moved aside, the new one renamed onto it and the old
    one removed. On an error ``path`` is untouched. An existing ``path`` that
    ``check_output_dir(path, writer, force)`` refuses is refused here before anything is
    written. ``writer`` None: a part of a larger output (no marker; only a new or empty
    ``path`` unless forced)."""
    path = Path(path)
    check_output_dir(path, writer or "", force or path.resolve() in _forced, key="path",
                     force_flag="force=True")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        yield tmp
        if writer:
            mark_output_dir(tmp, writer)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
