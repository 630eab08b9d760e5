"""The DiT importer: RLinf's WoVR world model (the DiffSynth fork's action-conditioned Wan
DiT) into the directory layout ``ActionWanModel.from_pretrained`` reads.

The release (``RLinf/RLinf-Wan-LIBERO-*``) stores the DiT as ``model-00001.safetensors`` in the
original-Wan / DiffSynth key names, with the two action modules beside the DiT's own weights
and no text embedding (the fork conditions on action tokens only). This module

* renames the DiT keys to diffusers' ``WanTransformer3DModel`` (``DIT_RENAMES``; diffusers'
  own Wan conversion script is the reference for the names),
* derives the transformer config from the tensors' shapes (``dit_config``), checks every key
  and shape against a meta-device ``WanTransformer3DModel`` built from it, and refuses a file of
  another architecture naming the keys,
* moves ``action_mlp1`` / ``action_mlp2`` into ``action/`` (the same modules as
  ``ActionConditioner``), with ``num_text_tokens: 0`` recorded in ``action/config.json``: the
  cross-attention context is the 13 action tokens alone, as in the fork's
  ``model_fn_wan_video`` (docs/reference/rlinf_wovr_release.md),
* streams: tensors are read one at a time (``safe_open``) and written in shards of at most
  ``shard_bytes``, so the peak memory is about one shard, not a second copy of the model.

Sources in bf16 or fp32, one file or several shards, with or without a ``model.`` prefix.
The ``text_embedder`` the diffusers class requires gets zeros (``text_dim`` inputs): with no
text tokens it never sees an input.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from wmrl.io.atomic import atomic_dir
from wmrl.pipeline.rlinf.common import (
    DIFFUSERS_STEM,
    ImportRefused,
    check_fits,
    meta_shapes,
    progress,
)
from wmrl.weights.safetensors_shards import write_sharded
from wmrl.world_model.files import ACTION_WEIGHTS

ACTION_PREFIXES = ("action_mlp1.", "action_mlp2.")
# original-Wan / DiffSynth name -> diffusers WanTransformer3DModel name (regex, replacement)
DIT_RENAMES: tuple[tuple[str, str], ...] = (
    (r"^patch_embedding\.", "patch_embedding."),
    (r"^time_embedding\.0\.", "condition_embedder.time_embedder.linear_1."),
    (r"^time_embedding\.2\.", "condition_embedder.time_embedder.linear_2."),
    (r"^time_projection\.1\.", "condition_embedder.time_proj."),
    (r"^text_embedding\.0\.", "condition_embedder.text_embedder.linear_1."),
    (r"^text_embedding\.2\.", "condition_embedder.text_embedder.linear_2."),
    (r"^blocks\.(\d+)\.self_attn\.([qkv])\.", r"blocks.\1.attn1.to_\2."),
    (r"^blocks\.(\d+)\.self_attn\.o\.", r"blocks.\1.attn1.to_out.0."),
    (r"^blocks\.(\d+)\.self_attn\.(norm_[qk])\.", r"blocks.\1.attn1.\2."),
    (r"^blocks\.(\d+)\.cross_attn\.([qkv])\.", r"blocks.\1.attn2.to_\2."),
    (r"^blocks\.(\d+)\.cross_attn\.o\.", r"blocks.\1.attn2.to_out.0."),
    (r"^blocks\.(\d+)\.cross_attn\.(norm_[qk])\.", r"blocks.\1.attn2.\2."),
    (r"^blocks\.(\d+)\.ffn\.0\.", r"blocks.\1.ffn.net.0.proj."),
    (r"^blocks\.(\d+)\.ffn\.2\.", r"blocks.\1.ffn.net.2."),
    (r"^blocks\.(\d+)\.norm3\.", r"blocks.\1.norm2."),  # the cross-attention pre-norm (affine)
    (r"^blocks\.(\d+)\.modulation$", r"blocks.\1.scale_shift_table"),
    (r"^head\.head\.", "proj_out."),
    (r"^head\.modulation$", "scale_shift_table"),
)
TEXT_EMBEDDER = ("condition_embedder.text_embedder.linear_1.",
                 "condition_embedder.text_embedder.linear_2.")
DEFAULT_TEXT_DIM = 4096  # the fork's config value; no text input reaches it
WAN_HEAD_DIM = 128  # every published Wan DiT (1.3B, 5B, 14B) has 128-wide heads


def dit_name(key: str) -> str:
    """A DiT key in diffusers' naming; raises ImportRefused for a key no rule knows."""
    for pattern, repl in DIT_RENAMES:
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    raise ImportRefused(f"no rename rule for {key!r}")


class SourceTensors:
    """The tensors of one or several safetensors files (a shard set), read lazily by name,
    with an optional ``model.`` prefix stripped. Only safetensors: nothing is unpickled."""

    def __init__(self, paths: Sequence[str | Path]):
        self.paths = [Path(p) for p in paths]
        self.where: dict[str, tuple[Path, str]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, str] = {}
        for path in self.paths:
            if not path.is_file():
                raise FileNotFoundError(f"--dit {str(path)!r}: no such file")
            if path.suffix != ".safetensors":
                raise ImportRefused(
                    f"--dit {str(path)!r}: expected the release's model-*.safetensors (a "
                    f"safetensors file), got a {path.suffix or 'suffix-less'} file")
            try:
                with safe_open(str(path), framework="pt") as f:
                    for raw in f.keys():
                        key = raw.removeprefix("model.")
                        if key in self.where:
                            raise ImportRefused(f"--dit: {key!r} is in both "
                                                f"{self.where[key][0]} and {path}")
                        sl = f.get_slice(raw)
                        self.where[key] = (path, raw)
                        self.shapes[key] = tuple(sl.get_shape())
                        self.dtypes[key] = sl.get_dtype()
            except ImportRefused:
                raise
            except Exception as err:  # noqa: BLE001 - safetensors' own error names the problem
                raise ImportRefused(f"--dit {str(path)!r} is not a readable safetensors file "
                                    f"({type(err).__name__}: {err})") from None

    def keys(self) -> list[str]:
        return sorted(self.where)

    def get(self, key: str) -> torch.Tensor:
        """One tensor, copied out of a mapping that is closed again: a handle kept open would
        keep every page read so far resident (the whole file by the end; measured 1.31 GiB
        peak over baseline instead of 0.29 for a 1.13 GiB file, scripts/bench.py
        rlinf_import), while a re-open costs one header parse."""
        path, raw = self.where[key]
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(raw)


def release_dit_shapes(dim: int = 3072, ffn: int = 14336, channels: int = 48,
                       freq_dim: int = 256, layers: int = 30, action_dim: int = 7,
                       actions_per_latent: int = 4) -> dict[str, tuple[int, ...]]:
    """The key -> shape table of the fork's WanModel as the release stores it (TI2V2: no
    text embedding, action_mlp1 + action_mlp2; patch (1, 2, 2)); the defaults are the 5B.
    For tests and benches of the importer at any size."""
    group = actions_per_latent * action_dim
    s = {"patch_embedding.weight": (dim, channels, 1, 2, 2), "patch_embedding.bias": (dim,),
         "time_embedding.0.weight": (dim, freq_dim), "time_embedding.0.bias": (dim,),
         "time_embedding.2.weight": (dim, dim), "time_embedding.2.bias": (dim,),
         "time_projection.1.weight": (6 * dim, dim), "time_projection.1.bias": (6 * dim,),
         "head.head.weight": (channels * 4, dim), "head.head.bias": (channels * 4,),
         "head.modulation": (1, 2, dim),
         "action_mlp1.0.weight": (dim, action_dim), "action_mlp1.0.bias": (dim,),
         "action_mlp1.2.weight": (dim, dim), "action_mlp1.2.bias": (dim,),
         "action_mlp2.0.weight": (actions_per_latent * dim, group),
         "action_mlp2.0.bias": (actions_per_latent * dim,),
         "action_mlp2.2.weight": (dim, actions_per_latent * dim), "action_mlp2.2.bias": (dim,)}
    for n in range(layers):
        b = f"blocks.{n}."
        for attn in ("self_attn", "cross_attn"):
            for p in "qkvo":
                s[f"{b}{attn}.{p}.weight"], s[f"{b}{attn}.{p}.bias"] = (dim, dim), (dim,)
            s[f"{b}{attn}.norm_q.weight"] = s[f"{b}{attn}.norm_k.weight"] = (dim,)
        s.update({f"{b}norm3.weight": (dim,), f"{b}norm3.bias": (dim,),
                  f"{b}ffn.0.weight": (ffn, dim), f"{b}ffn.0.bias": (ffn,),
                  f"{b}ffn.2.weight": (dim, ffn), f"{b}ffn.2.bias": (dim,),
                  f"{b}modulation": (1, 6, dim)})
    return s


def dit_config(shapes: dict[str, tuple[int, ...]], num_heads: int | None = None,
               text_dim: int | None = None) -> dict:
    """diffusers ``WanTransformer3DModel`` config from the original-Wan tensors' shapes."""
    need = ("patch_embedding.weight", "time_embedding.0.weight", "blocks.0.ffn.0.weight",
            "head.head.weight")
    missing = [k for k in need if k not in shapes]
    if missing:
        raise ImportRefused(f"not a Wan DiT in the original-Wan / DiffSynth layout: missing "
                            f"{missing}")
    dim, in_ch, *patch = shapes["patch_embedding.weight"]
    if len(patch) != 3:
        raise ImportRefused(f"patch_embedding.weight {shapes['patch_embedding.weight']} is not "
                            "a Conv3d weight [dim, in, pt, ph, pw]")
    layers = 1 + max(int(m.group(1)) for k in shapes if (m := re.match(r"blocks\.(\d+)\.", k)))
    if num_heads is None:
        if dim % WAN_HEAD_DIM:
            raise ImportRefused(f"dim {dim} is not a multiple of Wan's head width "
                                f"{WAN_HEAD_DIM}: pass num_heads")
        num_heads = dim // WAN_HEAD_DIM
    if dim % num_heads:
        raise ImportRefused(f"num_heads {num_heads} does not divide dim {dim}")
    out_ch = shapes["head.head.weight"][0] // math.prod(patch)
    if "text_embedding.0.weight" in shapes:
        text_dim = shapes["text_embedding.0.weight"][1]
    return {
        "_class_name": "WanTransformer3DModel",
        "patch_size": list(patch), "num_attention_heads": num_heads,
        "attention_head_dim": dim // num_heads, "in_channels": in_ch, "out_channels": out_ch,
        "text_dim": int(text_dim or DEFAULT_TEXT_DIM), "freq_dim": shapes["time_embedding.0.weight"][1],
        "ffn_dim": shapes["blocks.0.ffn.0.weight"][0], "num_layers": layers,
        "cross_attn_norm": "blocks.0.norm3.weight" in shapes, "qk_norm": "rms_norm_across_heads",
        "eps": 1e-6, "image_dim": None, "added_kv_proj_dim": None, "rope_max_seq_len": 1024,
    }


def action_config(shapes: dict[str, tuple[int, ...]], dim: int, text_dim: int) -> dict:
    """``action/config.json`` for the fork's action modules (the fork's conditioning: no text
    tokens, the 13 action tokens are the whole cross-attention context)."""
    missing = [k for k in ("action_mlp1.0.weight", "action_mlp1.2.weight", "action_mlp2.0.weight",
                           "action_mlp2.2.weight") if k not in shapes]
    if missing:
        raise ImportRefused(f"no action modules in the DiT file (missing {missing}): not an "
                            "action-conditioned WoVR world model")
    action_dim = shapes["action_mlp1.0.weight"][1]
    group = shapes["action_mlp2.0.weight"][1]
    if group % action_dim or shapes["action_mlp1.0.weight"][0] != dim:
        raise ImportRefused(f"action_mlp1/2 shapes {shapes['action_mlp1.0.weight']}, "
                            f"{shapes['action_mlp2.0.weight']} do not fit dim {dim}")
    apl = group // action_dim
    if shapes["action_mlp2.0.weight"][0] != apl * dim:
        raise ImportRefused(f"action_mlp2.0.weight {shapes['action_mlp2.0.weight']}: expected "
                            f"[{apl * dim}, {group}]")
    return {"dim": dim, "text_dim": text_dim, "action_dim": action_dim,
            "actions_per_latent": apl, "num_text_tokens": 0, "flow_shift": 5.0}


def plan_dit(shapes: dict[str, tuple[int, ...]], num_heads: int | None = None,
             text_dim: int | None = None, where: str = "--dit") -> dict:
    """From the release's key -> shape table alone: the transformer config, the action config,
    the diffusers name of every DiT key and the shapes of the zero text embedder; refuses a
    table that does not fit, naming the keys. No tensor is read."""
    dit_keys = sorted(k for k in shapes if not k.startswith(ACTION_PREFIXES))
    names, unknown = {}, []
    for k in dit_keys:
        try:
            names[k] = dit_name(k)
        except ImportRefused:
            unknown.append(k)
    if unknown:
        raise ImportRefused(f"{where}: {len(unknown)} keys of another architecture (no rename "
                            f"rule), e.g. {unknown[:5]}: expected the action-conditioned Wan DiT "
                            "in original-Wan / DiffSynth names")
    cfg = dit_config(shapes, num_heads, text_dim)
    from diffusers import WanTransformer3DModel

    expected = meta_shapes(WanTransformer3DModel, cfg)
    got = {names[k]: shapes[k] for k in dit_keys}
    zeros = {}
    if not any(k.startswith("text_embedding.") for k in dit_keys):  # the release: zeros
        zeros = {p + leaf: expected[p + leaf] for p in TEXT_EMBEDDER for leaf in ("weight", "bias")}
        got.update(zeros)
    check_fits(got, expected, f"{where} does not fit a WanTransformer3DModel with the config "
                f"its shapes give ({cfg['num_layers']} layers, dim "
                f"{cfg['num_attention_heads'] * cfg['attention_head_dim']})")
    acfg = action_config(shapes, cfg["num_attention_heads"] * cfg["attention_head_dim"],
                         cfg["text_dim"])
    return {"transformer": cfg, "action": acfg, "names": names, "zeros": zeros,
            "total_params": sum(math.prod(v) for v in got.values())}


def read_dit(paths: Sequence[str | Path], num_heads: int | None = None,
             text_dim: int | None = None) -> tuple[SourceTensors, dict]:
    """The release's DiT file(s) checked from their headers alone (whole safetensors files,
    every key known, shapes that plan to a diffusers config): (source, plan)."""
    src = SourceTensors(paths)
    return src, plan_dit(src.shapes, num_heads, text_dim,
                         where=f"--dit {[str(p) for p in src.paths]}")


def import_dit(paths: Sequence[str | Path], out: str | Path, num_heads: int | None = None,
               text_dim: int | None = None, shard_bytes: int = 2 << 30) -> dict:
    """``read_dit`` then ``write_dit``."""
    return write_dit(read_dit(paths, num_heads, text_dim), out, shard_bytes)


def write_dit(source: tuple[SourceTensors, dict], out: str | Path,
              shard_bytes: int = 2 << 30) -> dict:
    """``transformer/`` (diffusers, sharded safetensors + index) and ``action/`` under ``out``
    from what ``read_dit`` returned. Returns {transformer config, action config, counts}."""
    src, plan = source
    cfg, acfg, names, zeros = plan["transformer"], plan["action"], plan["names"], plan["zeros"]
    dit_keys = list(names)
    action_keys = [k for k in src.keys() if k.startswith(ACTION_PREFIXES)]
    dtype = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}.get(
        src.dtypes[dit_keys[0]], torch.float32)

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for k in dit_keys:
            yield names[k], src.get(k)
        for name, shape in sorted(zeros.items()):
            yield name, torch.zeros(shape, dtype=dtype)

    out = Path(out)
    with atomic_dir(out / "transformer") as tdir:
        total, files = write_sharded(
            tdir, progress(tensors(), len(dit_keys) + len(zeros), "[import] transformer"),
            shard_bytes, stem=DIFFUSERS_STEM, of_total=False)
        (tdir / "config.json").write_text(json.dumps(cfg, indent=2))
    with atomic_dir(out / "action") as adir:
        action = {k: src.get(k).float().contiguous() for k in action_keys}
        action["null_context"] = torch.zeros(0, cfg["text_dim"])
        save_file(action, str(adir / ACTION_WEIGHTS))
        (adir / "config.json").write_text(json.dumps(acfg, indent=2))
    return {"transformer": cfg, "action": acfg, "dit_tensors": len(dit_keys),
            "action_tensors": len(action_keys), "shards": len(files), "bytes": total}
