"""LoRA for any of wmrl's models, through peft: the project's one adapter mechanism.

A LoRA layer keeps its base weight ``W`` frozen and learns two small matrices beside it:

    y = x W^T + s * (dropout(x) A^T) B^T,    s = alpha / r,   A: [r, in],  B: [out, r]

so the layer computes with ``W' = W + s * B A`` and only ``A``, ``B`` train. ``B`` starts at
zero, so a fresh adapter leaves the model as it was. Gradients, by the chain rule through
``W'``:  dL/dB = s * G A^T,  dL/dA = s * B^T G,  with G = dL/dW' (``tests/weights/test_lora.py``
checks both against the full-parameter gradient of a GRPO step).

Adapters go in with peft's ``inject_adapter_in_model`` (the machinery under ``PeftModel`` and
diffusers' ``add_adapter``, which the world-model fine-tune uses), so the module keeps its
own type, methods and parameter names (``q_proj.weight`` becomes ``q_proj.base_layer.weight``
beside ``q_proj.lora_A.default.weight``). An adapter directory is peft's own layout
(``adapter_config.json`` + ``adapter_model.safetensors``, keys ``base_model.model.<name>``),
so one that ``PeftModel.save_pretrained`` wrote - RLinf's LoRA releases included - loads, and
what ``write_adapter`` writes (``scripts/export.py --adapter``) loads with
``PeftModel.from_pretrained``.

A spec (``policy.lora``, ``lora`` of the world-model fine-tune) is a mapping
``{rank, alpha, dropout, target_modules, init, path}``: alpha defaults to the rank; ``path``
loads an adapter directory, whose own ``adapter_config.json`` then decides the rank, alpha and
targets (as ``PeftModel.from_pretrained`` does).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from wmrl.errors import ConfigError
from wmrl.io.atomic import atomic_dir

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # what PeftModel puts before every saved key
ADAPTER = "default"  # the one adapter a wmrl model carries

SPEC_KEYS = ("rank", "alpha", "dropout", "target_modules", "init", "path")


def lora_config(spec: Mapping[str, Any], default_targets: Sequence[str] = ()):
    """peft ``LoraConfig`` from a spec; a bad spec is a ``ConfigError`` naming the key."""
    from peft import LoraConfig

    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"lora: unknown key(s) {unknown}; a LoRA spec takes {list(SPEC_KEYS)}")
    rank = 32 if spec.get("rank") is None else int(spec["rank"])
    if rank < 1:
        raise ConfigError(f"lora.rank={rank} must be >= 1")
    dropout = float(spec.get("dropout") or 0.0)
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"lora.dropout={dropout} must be in [0, 1)")
    targets = spec.get("target_modules") or list(default_targets)
    if not targets:
        raise ConfigError("lora.target_modules is empty: name the layers to adapt "
                          "(e.g. [q_proj, v_proj])")
    init = spec.get("init", True)
    if init not in (True, False, "gaussian"):
        raise ConfigError(f"lora.init={init!r}: true (peft's default, A Kaiming-uniform), "
                          "gaussian (A ~ N(0, 1/r), as RLinf) or false (B random too: tests)")
    return LoraConfig(r=rank, lora_alpha=float(spec.get("alpha") or rank), lora_dropout=dropout,
                      target_modules=list(targets), init_lora_weights=init)


def add_lora(module: nn.Module, spec: Mapping[str, Any] | None = None,
             default_targets: Sequence[str] = (), config: Any = None) -> nn.Module:
    """Freeze ``module`` and inject adapters (trainable) by ``spec`` - with ``spec.path``, the
    adapter directory's config and weights - or by a peft ``config``. Returns ``module``
    (changed in place)."""
    from peft import LoraConfig, inject_adapter_in_model

    path = (spec or {}).get("path")
    if config is None:
        config = (LoraConfig.from_pretrained(_adapter_dir(path)) if path
                  else lora_config(spec or {}, default_targets))
    module.requires_grad_(False)
    try:
        inject_adapter_in_model(config, module, adapter_name=ADAPTER)
    except ValueError as err:  # peft: "Target modules ... not found in the base model"
        raise ConfigError(f"lora.target_modules {sorted(config.target_modules)}: "
                          f"{str(err).splitlines()[0][:200]}") from None
    with torch.no_grad():  # adapters in float32 whatever the base's dtype, as PeftModel's
        for name, param in module.named_parameters():  # autocast_adapter_dtype: the
            if is_adapter_key(name) and param.dtype != torch.float32:  # trained weights
                param.data = param.data.float()  # are master weights (peft casts inputs)
    if path:
        load_adapter(module, path)
    return module


def config_json(module: nn.Module) -> str:
    """The adapter's peft config as JSON (kept in checkpoints: export needs no adapter path)."""
    d = _peft_config(module).to_dict()
    return json.dumps({k: sorted(v) if isinstance(v, set) else v for k, v in d.items()})


def config_from_json(text: str):
    from peft import LoraConfig

    return LoraConfig.from_peft_type(**json.loads(text))


def peft_names(state: Mapping[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Adapter entries of a module's state dict (``<prefix><name>.lora_A.default.weight``)
    under peft's saved names (``<name>.lora_A.weight``)."""
    return {k[len(prefix):].replace(f".{ADAPTER}.", "."): v for k, v in state.items()
            if k.startswith(prefix) and is_adapter_key(k)}


def _adapter_dir(path: str) -> str:
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if not os.path.isfile(os.path.join(path, name)):
            raise ConfigError(f"lora.path={path}: no {name} there (a peft adapter directory, "
                              "as PeftModel.save_pretrained or scripts/export.py --adapter "
                              "writes it)")
    return path


def has_lora(module: nn.Module) -> bool:
    """Whether ``module`` carries adapters (by name: importing peft takes seconds, and every
    rollout actor asks)."""
    return any(is_adapter_key(name) for name, _ in module.named_parameters())


def is_adapter_key(name: str) -> bool:
    """A state-dict entry of an adapter (``...lora_A.default.weight``), not of the base."""
    return ".lora_" in name


def synced_entries(module: nn.Module):
    """What a weight sync of ``module`` carries, as a ``keep(name)`` filter: with adapters,
    the adapters alone (the frozen base is built the same on both sides); else None, all."""
    return is_adapter_key if has_lora(module) else None


def adapter_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names (``<name>.lora_A.weight``, no prefix)."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(module, adapter_name=ADAPTER, save_embedding_layers=False)


def load_adapter(module: nn.Module, path: str) -> None:
    """Copy a peft adapter directory's weights into ``module``'s adapters (every adapter
    tensor must be there, with the module's shape)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(os.path.join(_adapter_dir(path), ADAPTER_WEIGHTS))
    state = {k.removeprefix(PEFT_PREFIX): v for k, v in weights.items()}
    want = adapter_state_dict(module)
    missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
    if missing or extra:
        raise ConfigError(f"lora.path={path} does not fit this model: missing {missing[:3]}, "
                          f"unexpected {extra[:3]} (an adapter for another model or targets)")
    for k, v in state.items():
        if v.shape != want[k].shape:
            raise ConfigError(f"lora.path={path}: {k} is {list(v.shape)}, the model's adapter "
                              f"is {list(want[k].shape)}")
    set_peft_model_state_dict(module, state, adapter_name=ADAPTER)


def write_adapter(path: str, config: Any, state: Mapping[str, torch.Tensor],
                  base_model: str | None = None) -> dict[str, Any]:
    """A peft adapter directory at ``path`` (``adapter_config.json`` as peft writes it,
    ``adapter_model.safetensors`` with ``base_model.model.`` keys), whole or not at all.
    ``state``: peft's saved names. Returns a summary."""
    from safetensors.torch import save_file

    tensors = {PEFT_PREFIX + k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    config = copy.copy(config)
    config.base_model_name_or_path = base_model
    with atomic_dir(path, "lora_adapter") as tmp:
        config.save_pretrained(str(tmp))
        save_file(tensors, os.path.join(str(tmp), ADAPTER_WEIGHTS), metadata={"format": "pt"})
    return {"out": str(path), "tensors": len(tensors), "rank": config.r,
            "bytes": sum(t.numel() * t.element_size() for t in tensors.values())}


def _peft_config(module: nn.Module):
    config = getattr(module, "peft_config", {}).get(ADAPTER)
    if config is None:
        raise ConfigError("the model carries no LoRA adapter (lora is null)")
    return config


@contextlib.contextmanager
def adapters_disabled(module: nn.Module) -> Iterator[None]:
    """The base model: every adapter of ``module`` off inside the block (no copy)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in module.modules() if isinstance(m, BaseTunerLayer)]
    for m in layers:
        m.enable_adapters(False)
    try:
        yield
    finally:
        for m in layers:
            m.enable_adapters(True)


def merged_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """``module``'s state in the base model's names with every adapter folded in
    (``W + s * B A``; the module itself is not changed)."""
    modules = dict(module.named_modules())
    out = {}
    for key, value in module.state_dict().items():
        if is_adapter_key(key):
            continue
        owner, _, leaf = key.rpartition(".base_layer.")
        if leaf == "weight" and ADAPTER in getattr(modules[owner], "lora_A", {}):
            # one layer's delta at a time (all at once would be a second policy in float32),
            # summed in float32 and rounded once to the weight's dtype
            with torch.no_grad():
                delta = modules[owner].get_delta_weight(ADAPTER)
            value = (value.float() + delta.float()).to(value.dtype)
        out[key.replace(".base_layer.", ".")] = value
    return out
