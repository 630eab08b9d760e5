"""Import RLinf's WoVR world model (the DiffSynth fork's action-conditioned Wan DiT) into the
directory layout ``ActionWanModel.from_pretrained`` reads.

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
import pickle
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from wmrl.atomic import atomic_dir, write_text
from wmrl.envs.initial_states import OPEN_GRIPPER, write_initial_states
from wmrl.safetensors_shards import write_sharded
from wmrl.world_model.files import ACTION_WEIGHTS

ACTION_PREFIXES = ("action_mlp1.", "action_mlp2.")
DIFFUSERS_STEM = "diffusion_pytorch_model"  # diffusers' weight file names
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


class ImportRefused(ValueError):
    """The source is not what the importer expects; the message names the file and the keys."""


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


def _meta_shapes(cls, cfg: dict) -> dict[str, tuple[int, ...]]:
    """The state-dict shapes of ``cls(**cfg)`` built on the meta device (no memory)."""
    with torch.device("meta"):
        model = cls(**{k: v for k, v in cfg.items() if not k.startswith("_")})
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_fits(got: dict, expected: dict, what: str) -> None:
    """Refuse, naming the keys, unless ``got`` has exactly ``expected``'s keys and shapes."""
    missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    bad = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    if missing or extra or bad:
        raise ImportRefused(f"{what}: missing {missing[:5]}, unexpected {extra[:5]}, shape "
                            f"mismatches {[(k, got[k], expected[k]) for k in bad[:3]]}")


def _progress(tensors: Iterator[tuple[str, torch.Tensor]], count: int, desc: str):
    """A progress bar over the tensors on stderr: a 5B DiT takes minutes to write."""
    return tqdm(tensors, total=count, desc=desc, unit="tensor", mininterval=2.0, leave=False)


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

    expected = _meta_shapes(WanTransformer3DModel, cfg)
    got = {names[k]: shapes[k] for k in dit_keys}
    zeros = {}
    if not any(k.startswith("text_embedding.") for k in dit_keys):  # the release: zeros
        zeros = {p + leaf: expected[p + leaf] for p in TEXT_EMBEDDER for leaf in ("weight", "bias")}
        got.update(zeros)
    _check_fits(got, expected, f"{where} does not fit a WanTransformer3DModel with the config "
                f"its shapes give ({cfg['num_layers']} layers, dim "
                f"{cfg['num_attention_heads'] * cfg['attention_head_dim']})")
    acfg = action_config(shapes, cfg["num_attention_heads"] * cfg["attention_head_dim"],
                         cfg["text_dim"])
    return {"transformer": cfg, "action": acfg, "names": names, "zeros": zeros,
            "total_params": sum(math.prod(v) for v in got.values())}


def import_dit(paths: Sequence[str | Path], out: str | Path, num_heads: int | None = None,
               text_dim: int | None = None, shard_bytes: int = 2 << 30) -> dict:
    """``transformer/`` (diffusers, sharded safetensors + index) and ``action/`` under ``out``
    from the release's DiT file(s). Returns {transformer config, action config, counts}."""
    src = SourceTensors(paths)
    plan = plan_dit(src.shapes, num_heads, text_dim, where=f"--dit {[str(p) for p in src.paths]}")
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
            tdir, _progress(tensors(), len(dit_keys) + len(zeros), "[import] transformer"),
            shard_bytes, stem=DIFFUSERS_STEM, of_total=False)
        (tdir / "config.json").write_text(json.dumps(cfg, indent=2))
    with atomic_dir(out / "action") as adir:
        action = {k: src.get(k).float().contiguous() for k in action_keys}
        action["null_context"] = torch.zeros(0, cfg["text_dim"])
        save_file(action, str(adir / ACTION_WEIGHTS))
        (adir / "config.json").write_text(json.dumps(acfg, indent=2))
    return {"transformer": cfg, "action": acfg, "dit_tensors": len(dit_keys),
            "action_tensors": len(action_keys), "shards": len(files), "bytes": total}


# ---- the Wan2.2 VAE (the release's Wan2.2_VAE.pth, original Wan2.2 layout) ------------------
# Wan2.2's latent statistics (z_dim 48), as its VAE wrapper normalises with them; they are not
# in the .pth. A VAE of another z_dim needs them given.
WAN22_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542,
    0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,
    0.2665, -0.2108, -0.2158, 0.2502, -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899,
    -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667)
WAN22_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344,
    0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804,
    0.5833, 1.4146, 0.8986, 0.5659, 0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999,
    0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744)
_RESNET = ((".residual.0.gamma", ".norm1.gamma"), (".residual.2.", ".conv1."),
           (".residual.3.gamma", ".norm2.gamma"), (".residual.6.", ".conv2."),
           (".shortcut.", ".conv_shortcut."))
_VAE_FIXED = {"conv1.": "quant_conv.", "conv2.": "post_quant_conv.",
              "encoder.conv1.": "encoder.conv_in.", "decoder.conv1.": "decoder.conv_in.",
              "encoder.head.0.": "encoder.norm_out.", "encoder.head.2.": "encoder.conv_out.",
              "decoder.head.0.": "decoder.norm_out.", "decoder.head.2.": "decoder.conv_out."}


def vae_name(key: str) -> str:
    """A Wan2.2 VAE key in diffusers' ``AutoencoderKLWan`` naming (is_residual=True)."""
    for old, new in _VAE_FIXED.items():
        if key.startswith(old) and key.count(".") == old.count("."):
            return new + key[len(old):]
    if m := re.match(r"^(encoder|decoder)\.middle\.([012])\.(.+)$", key):
        part, i, rest = m.groups()
        if i == "1":
            return f"{part}.mid_block.attentions.0.{rest}"
        name = f"{part}.mid_block.resnets.{int(i) // 2}.{rest}"
        for old, new in _RESNET:
            name = name.replace(old, new)
        return name
    if m := re.match(r"^(encoder\.down|decoder\.up)samples\.(\d+)\.(?:down|up)samples\.(\d+)\.(.+)$",
                     key):
        part, stage, j, rest = m.groups()
        block = f"{part}_blocks.{stage}"
        if rest.startswith(("resample.", "time_conv.")):
            return f"{block}.{'downsampler' if part.startswith('encoder') else 'upsampler'}.{rest}"
        name = f"{block}.resnets.{j}.{rest}"
        for old, new in _RESNET:
            name = name.replace(old, new)
        return name
    raise ImportRefused(f"no VAE rename rule for {key!r}")


def vae_config(shapes: dict[str, tuple[int, ...]], latents_mean=None, latents_std=None) -> dict:
    """diffusers ``AutoencoderKLWan`` config (Wan2.2: residual, patchified) from the shapes."""
    need = ("encoder.conv1.weight", "conv2.weight", "decoder.head.2.weight")
    if any(k not in shapes for k in need):
        raise ImportRefused(f"not a Wan VAE in the original layout: missing "
                            f"{[k for k in need if k not in shapes]}")
    base, in_ch = shapes["encoder.conv1.weight"][:2]
    z = shapes["conv2.weight"][0]
    out_ch, dec_base = shapes["decoder.head.2.weight"][:2]
    stages = 1 + max(int(m.group(1)) for k in shapes
                     if (m := re.match(r"encoder\.downsamples\.(\d+)\.", k)))
    res_blocks = 1 + max(int(m.group(1)) for k in shapes
                         if (m := re.match(r"encoder\.downsamples\.0\.downsamples\.(\d+)\.residual",
                                           k)))
    mult = [shapes[f"encoder.downsamples.{i}.downsamples.0.residual.2.weight"][0] // base
            for i in range(stages)]
    temporal = [f"encoder.downsamples.{i}.downsamples.{res_blocks}.time_conv.weight" in shapes
                for i in range(stages - 1)]
    patch = {3: None, 12: 2}.get(in_ch)
    if in_ch not in (3, 12) or out_ch != in_ch:
        raise ImportRefused(f"encoder input / decoder output channels {in_ch} / {out_ch}: "
                            "expected 12 / 12 (Wan2.2, 2x2 patchified) or 3 / 3")
    if latents_mean is None or latents_std is None:
        if z != len(WAN22_LATENTS_MEAN):
            raise ImportRefused(f"z_dim {z} is not Wan2.2's 48: give latents_mean / latents_std")
        latents_mean, latents_std = WAN22_LATENTS_MEAN, WAN22_LATENTS_STD
    if len(latents_mean) != z or len(latents_std) != z:
        raise ImportRefused(f"latents_mean / latents_std need {z} entries each")
    return {"_class_name": "AutoencoderKLWan", "base_dim": base, "decoder_base_dim": dec_base,
            "z_dim": z, "dim_mult": mult, "num_res_blocks": res_blocks, "attn_scales": [],
            "temperal_downsample": temporal, "dropout": 0.0, "is_residual": True,
            "in_channels": in_ch, "out_channels": out_ch, "patch_size": patch,
            "scale_factor_temporal": 2 ** sum(temporal),
            "scale_factor_spatial": 2 ** (stages - 1) * (patch or 1),
            "latents_mean": [float(v) for v in latents_mean],
            "latents_std": [float(v) for v in latents_std]}


def import_vae(path: str | Path, out: str | Path, latents_mean=None, latents_std=None,
               shard_bytes: int = 2 << 30) -> dict:
    """``<out>/vae/`` (diffusers ``AutoencoderKLWan``) from the original Wan2.2 VAE ``.pth`` (a
    flat state dict, or one under ``model_state``), loaded with ``weights_only=True`` and
    memory-mapped. Every key and shape is checked against a meta-device model."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--vae {str(path)!r}: no such file")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - a pickle that is not plain tensors, or not a zip
        raise ImportRefused(f"--vae {str(path)!r}: not a weights-only torch checkpoint "
                            f"({type(err).__name__}: {str(err).splitlines()[0]})") from None
    if isinstance(state, dict) and isinstance(state.get("model_state"), dict):
        state = state["model_state"]
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ImportRefused(f"--vae {str(path)!r}: expected a state dict of tensors (the "
                            "release's Wan2.2_VAE.pth)")
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    cfg = vae_config(shapes, latents_mean, latents_std)
    names = {}
    for k in state:
        try:
            names[k] = vae_name(k)
        except ImportRefused:
            raise ImportRefused(f"--vae {str(path)!r}: {k!r} is not a Wan2.2 VAE key") from None
    from diffusers import AutoencoderKLWan

    _check_fits({names[k]: shapes[k] for k in state}, _meta_shapes(AutoencoderKLWan, cfg),
                f"--vae {str(path)!r} does not fit AutoencoderKLWan({cfg['z_dim']} latent "
                "channels)")
    with atomic_dir(Path(out) / "vae") as vdir:
        items = ((names[k], state[k]) for k in sorted(state))
        total, _ = write_sharded(vdir, _progress(items, len(state), "[import] vae"), shard_bytes,
                                 stem=DIFFUSERS_STEM, of_total=False)
        (vdir / "config.json").write_text(json.dumps(cfg, indent=2))
    return {"vae": cfg, "vae_tensors": len(state), "bytes": total}


# ---- the reset data (the release's dataset/: traj*.npy, traj*_kir.npy) ------------------------
# A .npy of per-frame dicts is a pickle; only numpy's own array / dtype / scalar reconstruction
# is allowed to run while reading it (no other global can be named by the file).
_NPY_GLOBALS = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
                for n in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _NPY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array part: refused")


def load_npy(path: Path) -> np.ndarray:
    """``np.load`` for object arrays without unpickling anything but numpy arrays and scalars
    (dicts, lists, strings, numbers are plain pickle values)."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read(f)
        except ValueError as err:
            raise ImportRefused(f"{path}: not a .npy file ({err})") from None
        if not dtype.hasobject:
            return np.load(path, allow_pickle=False)
        try:
            arr = _NumpyOnlyUnpickler(f).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
            raise ImportRefused(f"{path}: {err}") from None
    if not isinstance(arr, np.ndarray) or arr.shape != shape:
        raise ImportRefused(f"{path}: the pickled payload is not the {shape} array its header "
                            "announces")
    return arr


def _frame_image(frame: dict, path: Path, t: int) -> np.ndarray:
    img = frame.get("image")
    if img is None:  # as RLinf's reader: the first 3-D array when there is no 'image'
        img = next((v for v in frame.values() if isinstance(v, np.ndarray) and v.ndim == 3), None)
    if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3:
        raise ImportRefused(f"{path} frame {t}: no HWC image (keys {sorted(frame)})")
    if img.dtype != np.uint8:
        if not (np.issubdtype(img.dtype, np.number) and img.min() >= 0 and img.max() <= 255):
            raise ImportRefused(f"{path} frame {t}: image {img.dtype} outside [0, 255]")
        img = np.rint(img).astype(np.uint8)
    return img


def _frame_action(frame: dict, path: Path, t: int) -> np.ndarray:
    if "delta_action" not in frame:
        raise ImportRefused(f"{path} frame {t}: no 'delta_action' (keys {sorted(frame)})")
    return np.asarray(frame["delta_action"], dtype=np.float32).reshape(-1)


def _frame_task(frame: dict, path: Path) -> str:
    for key in ("instruction", "task"):
        if key in frame:
            v = frame[key]
            return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v)
    raise ImportRefused(f"{path} frame 0: no 'instruction' or 'task' (keys {sorted(frame)})")


def import_reset_data(dataset: str | Path, out: str | Path, enable_kir: bool = True,
                      context_frames: int = 4) -> dict:
    """``<out>/initial_states/`` (wmrl's format, with KIR context for every state) from the
    release's ``dataset/``, state i = the i-th file in the order RLinf's reader takes them
    (sorted names; ``*_kir*`` files only with ``enable_kir``). As RLinf's WanEnv resets: the
    anchor is frame 0; a file with at least ``context_frames`` frames starts from its last
    ``context_frames`` frames and their ``delta_action``s (KIR), a shorter one from frame 0
    repeated with the env's reset actions (zeros, gripper open: ``OPEN_GRIPPER``)."""
    root = Path(dataset)
    if not root.is_dir():
        raise FileNotFoundError(f"--dataset {str(root)!r}: no such directory")
    files = sorted(p for p in root.glob("*.npy") if enable_kir or "_kir" not in p.name)
    if not files:
        raise ImportRefused(f"--dataset {str(root)!r}: no *.npy trajectory files")
    anchors, tasks, ctx_frames, ctx_actions, kir = [], [], [], [], 0
    for path in files:
        traj = load_npy(path)
        if traj.ndim != 1 or len(traj) == 0 or not all(isinstance(f, dict) for f in traj):
            raise ImportRefused(f"{path}: expected a sequence of per-frame dicts (RLinf's "
                                f"trajectory .npy), got {traj.dtype} {traj.shape}")
        anchor = _frame_image(traj[0], path, 0)
        action_dim = _frame_action(traj[0], path, 0).shape[0]
        if len(traj) >= context_frames:
            idx = range(len(traj) - context_frames, len(traj))
            ctx = np.stack([_frame_image(traj[t], path, t) for t in idx])
            acts = np.stack([_frame_action(traj[t], path, t) for t in idx])
            kir += 1
        else:
            ctx = np.repeat(anchor[None], context_frames, 0)
            acts = np.zeros((context_frames, action_dim), np.float32)
            acts[:, -1] = OPEN_GRIPPER
        if anchors and (anchor.shape != anchors[0].shape or ctx.shape[1:] != anchors[0].shape):
            raise ImportRefused(f"{path}: images {anchor.shape} differ from {files[0].name}'s "
                                f"{anchors[0].shape}")
        anchors.append(anchor)
        tasks.append(_frame_task(traj[0], path))
        ctx_frames.append(ctx)
        ctx_actions.append(acts)
    dest = write_initial_states(Path(out) / "initial_states", np.stack(anchors), tasks,
                                np.stack(ctx_frames), np.stack(ctx_actions))
    write_text(dest / "sources.json", json.dumps([p.name for p in files], indent=1))
    return {"initial_states": str(dest), "states": len(files), "kir_states": kir,
            "tasks": sorted(set(tasks)), "image": list(anchors[0].shape)}
