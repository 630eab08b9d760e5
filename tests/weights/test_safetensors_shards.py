"""``wmrl.weights.safetensors_shards.write_sharded``: shard names, index text and sizes by hand, for
transformers' layout (the policy) and diffusers' (the RLinf importer)."""

import os

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from wmrl.weights.safetensors_shards import INDEX_NAME, write_sharded


def tensors() -> list[tuple[str, torch.Tensor]]:
    """40 + 40 bytes fill an 80-byte shard; 8 more open the next; 120 get a shard alone."""
    return [("a", torch.arange(10, dtype=torch.float32)), ("b", torch.full((10,), -0.0)),
            ("c", torch.tensor([1.5, float("nan"), -2.0, 3.0], dtype=torch.bfloat16)),
            ("d", torch.arange(30, dtype=torch.float32).view(5, 6))]


def test_transformers_layout_by_hand(tmp_path):
    total, names = write_sharded(tmp_path, iter(tensors()), max_shard_bytes=80)
    assert total == 40 + 40 + 8 + 120
    assert names == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert sorted(os.listdir(tmp_path)) == sorted([*names, INDEX_NAME])
    assert INDEX_NAME == "model.safetensors.index.json"
    assert (tmp_path / INDEX_NAME).read_text() == """{
  "metadata": {
    "total_size": 208
  },
  "weight_map": {
    "a": "model-00001-of-00003.safetensors",
    "b": "model-00001-of-00003.safetensors",
    "c": "model-00002-of-00003.safetensors",
    "d": "model-00003-of-00003.safetensors"
  }
}"""
    stored = {}
    for name in names:
        with safe_open(str(tmp_path / name), framework="pt") as f:
            assert f.metadata() == {"format": "pt"}
        stored.update(load_file(str(tmp_path / name)))
    for k, t in tensors():  # bit for bit: -0.0 and NaN included
        assert stored[k].dtype == t.dtype and torch.equal(stored[k].view(torch.uint8),
                                                          t.view(torch.uint8))
    # everything in one shard: still numbered "of 1", still indexed
    (tmp_path / "one").mkdir()
    assert write_sharded(tmp_path / "one", tensors(), 10**6)[1] == [
        "model-00001-of-00001.safetensors"]
    assert sorted(os.listdir(tmp_path / "one")) == ["model-00001-of-00001.safetensors",
                                                    INDEX_NAME]


def test_diffusers_layout_by_hand(tmp_path):
    stem = "diffusion_pytorch_model"
    total, names = write_sharded(tmp_path, tensors(), 80, stem=stem, of_total=False)
    assert total == 208 and names == [f"{stem}-0000{i}.safetensors" for i in (1, 2, 3)]
    index = tmp_path / f"{stem}.safetensors.index.json"
    assert sorted(os.listdir(tmp_path)) == sorted([*names, index.name])
    assert index.read_text().count(f'"{stem}-00001.safetensors"') == 2  # a and b
    # one shard: diffusers' unsharded name, no index
    (tmp_path / "one").mkdir()
    assert write_sharded(tmp_path / "one", tensors(), 208, stem=stem, of_total=False) == (
        208, [f"{stem}.safetensors"])
    assert os.listdir(tmp_path / "one") == [f"{stem}.safetensors"]
