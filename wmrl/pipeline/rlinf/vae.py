"""The VAE importer: the release's Wan2.2_VAE.pth (original Wan2.2 layout) into diffusers'
``AutoencoderKLWan`` layout (``torch.load(weights_only=True)``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from wmrl.io.atomic import atomic_dir
from wmrl.pipeline.rlinf.common import (
    DIFFUSERS_STEM,
    ImportRefused,
    check_fits,
    meta_shapes,
    progress,
)
from wmrl.weights.safetensors_shards import write_sharded

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


_VAE_FIXED_BACK = {new: old for old, new in _VAE_FIXED.items()}


def vae_release_name(name: str, blocks: dict[str, int]) -> str:
    """A diffusers ``AutoencoderKLWan`` key in the original Wan2.2 layout: ``vae_name``'s
    inverse. ``blocks``: resnets per stage (``encoder.down_blocks.0`` -> 2), where a stage's
    down/upsampler follows them."""
    for new, old in _VAE_FIXED_BACK.items():
        if name.startswith(new) and name.count(".") == new.count("."):
            return old + name[len(new):]
    if m := re.match(r"^(encoder|decoder)\.mid_block\.(attentions|resnets)\.(\d+)\.(.+)$", name):
        part, kind, i, rest = m.groups()
        if kind == "attentions":
            return f"{part}.middle.1.{rest}"
        return _resnet_back(f"{part}.middle.{2 * int(i)}.{rest}")
    if m := re.match(r"^(encoder\.down|decoder\.up)_blocks\.(\d+)\.(resnets\.(\d+)|"
                     r"downsampler|upsampler)\.(.+)$", name):
        part, stage, what, j, rest = m.groups()
        kind = "down" if part.startswith("encoder") else "up"
        index = j if j is not None else blocks[f"{part}_blocks.{stage}"]
        key = f"{part}samples.{stage}.{kind}samples.{index}.{rest}"
        return _resnet_back(key) if j is not None else key
    raise ImportRefused(f"no Wan2.2 name for the VAE key {name!r}")


def _resnet_back(key: str) -> str:
    for old, new in _RESNET:
        key = key.replace(new, old)
    return key


def release_vae_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The key -> shape table of the release's ``Wan2.2_VAE.pth`` (original Wan2.2 layout) for
    the diffusers ``AutoencoderKLWan`` ``config`` (built on meta; every name checked to come
    back through ``vae_name``). For checks and benches of the importer at any size."""
    from diffusers import AutoencoderKLWan

    shapes = meta_shapes(AutoencoderKLWan, config)
    blocks: dict[str, int] = {}
    for name in shapes:
        if m := re.match(r"^((?:encoder\.down|decoder\.up)_blocks\.\d+)\.resnets\.(\d+)\.",
                         name):
            blocks[m.group(1)] = max(blocks.get(m.group(1), 0), int(m.group(2)) + 1)
    out = {}
    for name, shape in shapes.items():
        key = vae_release_name(name, blocks)
        if vae_name(key) != name:
            raise ImportRefused(f"the VAE key {name!r} has no Wan2.2 name ({key!r} maps to "
                                f"{vae_name(key)!r})")
        out[key] = shape
    return out


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


def read_vae(path: str | Path, latents_mean=None, latents_std=None
             ) -> tuple[dict[str, torch.Tensor], dict[str, str], dict]:
    """The original Wan2.2 VAE ``.pth`` (a flat state dict, or one under ``model_state``),
    loaded with ``weights_only=True`` and memory-mapped (no tensor data read), checked key by
    key and shape by shape against a meta-device ``AutoencoderKLWan``: (state, diffusers name
    per key, config). Refuses before anything is written."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--vae {str(path)!r}: no such file")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 - a pickle that is not plain tensors, or not a zip
        raise ImportRefused(f"--vae {str(path)!r}: not a weights-only torch checkpoint "
                            f"({type(err).__name__}: {str(err).strip().splitlines()[0]})"
                            ) from None
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

    check_fits({names[k]: shapes[k] for k in state}, meta_shapes(AutoencoderKLWan, cfg),
               f"--vae {str(path)!r} does not fit AutoencoderKLWan({cfg['z_dim']} latent "
               "channels)")
    return state, names, cfg


def write_vae(source: tuple[dict[str, torch.Tensor], dict[str, str], dict], out: str | Path,
              shard_bytes: int = 2 << 30) -> dict:
    """``<out>/vae/`` (diffusers ``AutoencoderKLWan``) from what ``read_vae`` returned."""
    state, names, cfg = source
    with atomic_dir(Path(out) / "vae") as vdir:
        items = ((names[k], state[k]) for k in sorted(state))
        total, _ = write_sharded(vdir, progress(items, len(state), "[import] vae"), shard_bytes,
                                 stem=DIFFUSERS_STEM, of_total=False)
        (vdir / "config.json").write_text(json.dumps(cfg, indent=2))
    return {"vae": cfg, "vae_tensors": len(state), "bytes": total}


def import_vae(path: str | Path, out: str | Path, latents_mean=None, latents_std=None,
               shard_bytes: int = 2 << 30) -> dict:
    """``read_vae`` then ``write_vae``."""
    return write_vae(read_vae(path, latents_mean, latents_std), out, shard_bytes)
