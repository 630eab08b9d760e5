"""``wmrl.atomic``: a failed write leaves the old file and no temp file behind."""

import os

import pytest

from wmrl.atomic import atomic_dir, atomic_path, write_text


def test_atomic_write_replaces_or_leaves_the_old_file(tmp_path):
    target = tmp_path / "sub" / "meta.json"
    write_text(target, "v1")
    assert target.read_text() == "v1" and oct(os.stat(target).st_mode & 0o777) == "0o644"
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_path(target) as tmp:
            assert tmp.endswith(".json") and os.path.dirname(tmp) == str(target.parent)
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("crash")
    assert target.read_text() == "v1" and os.listdir(target.parent) == ["meta.json"]
    write_text(target, "v2")
    assert target.read_text() == "v2" and os.listdir(target.parent) == ["meta.json"]


def test_atomic_dir_swaps_a_whole_folder_or_leaves_the_old_one(tmp_path):
    target = tmp_path / "wm" / "transformer"
    with atomic_dir(target) as d:
        (d / "a.safetensors").write_text("v1")
        (d / "b.safetensors").write_text("v1")
    assert sorted(os.listdir(target)) == ["a.safetensors", "b.safetensors"]
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_dir(target) as d:
            (d / "a.safetensors").write_text("half")
            raise RuntimeError("crash")
    assert (target / "a.safetensors").read_text() == "v1"
    with atomic_dir(target) as d:  # fewer files than before: no stale shard survives
        (d / "model.safetensors").write_text("v2")
    assert os.listdir(target) == ["model.safetensors"]
    assert os.listdir(target.parent) == ["transformer"]  # no temp or old folder left
