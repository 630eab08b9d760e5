"""``wmrl.io.atomic``: a failed write leaves the old file and no temp file behind; no output
folder replaces one holding what its writer did not write."""

import json
import os

import pytest

from wmrl.errors import ConfigError
from wmrl.io.atomic import OUTPUT_MARKER, atomic_dir, atomic_path, check_output_dir, write_text


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
    with atomic_dir(target, "shards") as d:
        (d / "a.safetensors").write_text("v1")
        (d / "b.safetensors").write_text("v1")
    assert sorted(os.listdir(target)) == [OUTPUT_MARKER, "a.safetensors", "b.safetensors"]
    assert json.loads((target / OUTPUT_MARKER).read_text()) == {
        "writer": "shards", "entries": ["a.safetensors", "b.safetensors"]}
    with pytest.raises(RuntimeError, match="crash"):
        with atomic_dir(target, "shards") as d:
            (d / "a.safetensors").write_text("half")
            raise RuntimeError("crash")
    assert (target / "a.safetensors").read_text() == "v1"
    with atomic_dir(target, "shards") as d:  # fewer files than before: no stale shard survives
        (d / "model.safetensors").write_text("v2")
    assert sorted(os.listdir(target)) == [OUTPUT_MARKER, "model.safetensors"]
    assert os.listdir(target.parent) == ["transformer"]  # no temp or old folder left


def test_a_folder_holding_a_users_file_is_refused_before_any_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    check_output_dir(out, "shards")  # empty: fine
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"^--out=.*out holds files wmrl's shards did not "
                       r"write \(notes.txt\): pick a new or empty folder, or pass --force"):
        check_output_dir(out, "shards")
    with pytest.raises(ConfigError, match="overwrite=true"):
        check_output_dir(out, "shards", key="out_dir")
    with pytest.raises(ConfigError, match="notes.txt"):  # the writer itself refuses too
        with atomic_dir(out, "shards"):
            raise AssertionError("never reached: refused before the block runs")
    assert os.listdir(out) == ["notes.txt"] and os.listdir(tmp_path) == ["out"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_output_dir(tmp_path / "file", "shards", force=True)


def test_own_output_is_replaced_another_writers_only_when_forced(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out, "reward") as d:
        (d / "model.safetensors").write_text("v1")
    check_output_dir(out, "reward")  # an earlier output of the same writer
    assert json.loads((out / OUTPUT_MARKER).read_text()) == {"writer": "reward",
                                                             "entries": ["model.safetensors"]}
    (out / "metrics.json").write_text("{}")  # written after the marker, in its layout: ours
    check_output_dir(out, "reward")
    (out / "notes.txt").write_text("mine")  # put in later by the user: refused
    with pytest.raises(ConfigError, match=r"reward did not write \(notes.txt\)"):
        check_output_dir(out, "reward")
    (out / "notes.txt").unlink()
    with pytest.raises(ConfigError, match="is reward's output, not world_model's"):
        check_output_dir(out, "world_model")
    check_output_dir(out, "world_model", force=True)  # the user said so: remembered ...
    with atomic_dir(out, "world_model") as d:  # ... so the writer replaces it
        (d / "action").mkdir()
    assert sorted(os.listdir(out)) == [OUTPUT_MARKER, "action"]


def test_unmarked_earlier_outputs_are_known_by_their_layout(tmp_path):
    wm = tmp_path / "wm"  # a world model from before markers (the checked-in asset's layout)
    for sub in ("transformer", "vae", "action"):
        (wm / sub).mkdir(parents=True)
    (wm / "action" / "action_modules.safetensors").write_text("w")
    (wm / "metrics_replay_reward.json").write_text("{}")
    check_output_dir(wm, "world_model")
    with pytest.raises(ConfigError, match="holds files wmrl's policy did not write"):
        check_output_dir(wm, "policy")
    (wm / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"world_model did not write \(notes.txt\)"):
        check_output_dir(wm, "world_model")
    policy = tmp_path / "downloaded"  # a policy layout without sft_metrics.json: not wmrl's
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="did not write"):
        check_output_dir(policy, "policy")
    (policy / "sft_metrics.json").write_text("{}")
    check_output_dir(policy, "policy")
