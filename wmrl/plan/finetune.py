"""The world-model fine-tune (``scripts/finetune_world_model.py``) at the real size: bytes per
rank, full fine-tune and LoRA (``make_finetune_plan``).

What is planned: the world model of the plan's ``env.world_model`` (Wan2.2-TI2V-5B at the real
size) as ``WorldModelFinetune._build`` prepares it, on the meta device, then converted to the
parameter dtype as ``trainer.precision=bf16-true`` converts the whole module (every parameter
and buffer in bfloat16); ``strategy=world_model_shard`` (conf/strategy/world_model_shard.yaml:
FSDP2 over N = ``trainer.devices`` ranks, one unit per ``WanTransformerBlock``, the DiT and the
two action MLPs as roots, everything outside the roots, the VAE above all, replicated); clips of
13 frames at the env's H x W, b = ``data.batch_size`` of conf/finetune_world_model.yaml per rank
(``+plan.finetune_clips``). Full: the DiT and the action modules trained. LoRA: the DiT frozen
with peft's adapters (``lora_config``, rank ``+plan.lora_rank``, default 32 as the fork's, on
``DIT_LORA_TARGETS``) injected by diffusers' ``add_adapter`` into the meta DiT, and the action
modules trained in full; its trainable count is counted on that injected model, P_t = sum over
the targeted Linear layers of r (in + out).

Notation: P_s the parameters under the FSDP roots (sharded), P_t the trainable ones (all under
the roots), e the parameter dtype's bytes (2), s the AdamW state dtype's bytes. GB = 1e9 bytes.

Per rank
  sharded weights     e P_s / N
  replicated          bytes of every parameter and buffer outside the roots (the VAE, the
                      fixed text context, the latent statistics)
  AdamW m + v         2 s P_t / N; master weights 4 P_t / N when the states are float32 and
                      e < 4, else none
  grads               e P_t / N (the sharded gradient; with bf16-true, in the param dtype)
  FSDP transients     e (root + 2 unit) + 4 unit_t: the gathered root groups (the roots'
                      parameters outside the blocks) and two gathered blocks (computing,
                      prefetched), and one block's unsharded float32 gradient (reduce_dtype
                      float32) of its unit_t trainable parameters
  activations         one step's peak, traced on meta (``trace_world_model_training``): the
                      VAE encode, the DiT forward + loss, the backward; checkpointing off / on
  AdamW step          s P_t / N: foreach AdamW's one temporary per state (sqrt(v)), counted
                      on top of the above (conservative: the step runs after backward)
  peak = the sum of these.

The optimizer-state assumption is a figure of the plan (``adamw_state_dtype``): with
``trainer.precision=bf16-true`` the parameters themselves are bfloat16, torch's AdamW keeps
exp_avg / exp_avg_sq ``zeros_like`` the parameter (bfloat16) and there is no float32 master
copy: 2 + 2 + 4 = 8 bytes per trainable parameter. The report gives beside it the peak with
float32 m + v and a float32 master copy (2 + 2 + 8 + 4 = 16 bytes: a mixed-precision optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from hydra.utils import get_class
from torch import nn

from wmrl.build import to_container
from wmrl.config import compose_config
from wmrl.finetune.world_model_module import DIT_LORA_TARGETS
from wmrl.plan.activations import trace_world_model_training
from wmrl.plan.memory import GB, PlanOptions, Role, _shard_group
from wmrl.plan.meta import build_world_model, cached, nbytes, numel
from wmrl.weights.lora import lora_config
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES

FINETUNE_CONFIG = "finetune_world_model"
FINETUNE_STRATEGY = "world_model_shard"
MODES = ("full", "lora")


@dataclass
class FinetunePlan:
    """Every figure of the fine-tune plan: the setup, parameter counts per mode, the traced
    activations per (mode, checkpointing), the per-rank bytes per (mode, checkpointing, state
    dtype) and which device sizes each fits."""
    header: dict[str, Any]
    params: dict[str, dict[str, int]]  # mode -> total, sharded, replicated, trainable, units
    activations: dict[tuple[str, bool], dict[str, int]]  # (mode, checkpointing) -> trace
    roles: dict[tuple[str, bool, str], Role]  # (mode, checkpointing, state dtype) -> bytes
    options: PlanOptions
    fits: dict[tuple[str, bool, str], dict[int, bool]] = field(default_factory=dict)


def finetune_config(devices: int, nodes: int = 1):
    """conf/finetune_world_model.yaml with ``strategy=world_model_shard`` on ``devices``
    (inside ``scripts/plan.py``'s ``hydra.main``, through its initialised Hydra)."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"strategy={FINETUNE_STRATEGY}", f"trainer.devices={devices}",
                 f"trainer.num_nodes={nodes}"]
    if GlobalHydra.instance().is_initialized():
        return hydra.compose(FINETUNE_CONFIG, overrides=overrides)
    return compose_config(FINETUNE_CONFIG, overrides)


def finetune_model(wm_cfg: dict, lora_rank: int | None, train_action_modules: bool = True
                   ) -> nn.Module:
    """The world model on meta as ``WorldModelFinetune._build`` marks it (``lora_rank`` None:
    full fine-tune), then in bfloat16 as bf16-true converts it."""
    model, _ = build_world_model(wm_cfg)
    model.vae.requires_grad_(False)
    model.transformer.requires_grad_(lora_rank is None)
    model.action.requires_grad_(lora_rank is None or train_action_modules)
    if lora_rank is not None:
        model.transformer.add_adapter(lora_config({"rank": lora_rank}, DIT_LORA_TARGETS))
    return model.to(torch.bfloat16)


def shard_layout(model: nn.Module, roots: list[str], wrap_classes: list[str]) -> dict[str, int]:
    """Parameter counts of the FSDP layout: ``sharded`` (under the roots), ``replicated_bytes``
    (every parameter and buffer outside them), ``trainable``, the largest ``unit`` (a wrap-class
    module) and its trainable ``unit_trainable``, ``root`` (the roots' parameters outside the
    units). ``roots`` are dotted paths from ``model`` (the strategy's, less ``model.``)."""
    classes = tuple(get_class(c) for c in wrap_classes)
    root_mods = [model.get_submodule(r) for r in roots]
    sharded = {id(p): p for m in root_mods for p in m.parameters()}
    units = [m for r in root_mods for m in r.modules() if classes and isinstance(m, classes)]
    in_units = sum(numel(u) for u in units)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    outside = [p for p in model.parameters() if id(p) not in sharded]
    if any(p.requires_grad for p in outside):
        raise ValueError("plan: trainable parameters outside strategy.root_modules")
    return dict(
        params=numel(model), trainable=trainable, sharded=sum(p.numel() for p in sharded.values()),
        sharded_bytes=sum(p.numel() * p.element_size() for p in sharded.values()),
        replicated_bytes=nbytes(model) - sum(p.numel() * p.element_size()
                                             for p in sharded.values()),
        unit=max((numel(u) for u in units), default=0),
        unit_trainable=max((sum(p.numel() for p in u.parameters() if p.requires_grad)
                            for u in units), default=0),
        root=sum(p.numel() for p in sharded.values()) - in_units,
        units=len(units), e=next(model.parameters()).element_size())


def rank_bytes(layout: dict[str, int], n: int, activations: int, state_bytes: int,
               note: str) -> Role:
    """One rank's bytes (module docstring) for a layout, the traced ``activations`` and AdamW
    states of ``state_bytes`` each."""
    e, pt = layout["e"], layout["trainable"]
    role = Role("world-model fine-tune", note=note)
    role.resident["weights_sharded"] = layout["sharded_bytes"] // n
    role.resident["replicated (VAE, context, statistics)"] = layout["replicated_bytes"]
    role.resident[f"adamw_m_v ({'fp32' if state_bytes == 4 else 'param dtype'})"] = (
        2 * state_bytes * pt // n)
    role.resident["master_weights_fp32"] = 4 * pt // n if state_bytes == 4 and e < 4 else 0
    role.working["grads"] = e * pt // n
    role.working["fsdp_gather_reduce"] = (e * (layout["root"] + 2 * layout["unit"])
                                          + 4 * layout["unit_trainable"]) if n > 1 else 0
    role.working["activations (traced step peak)"] = activations
    role.working["adamw_step_temporary"] = state_bytes * pt // n
    return role


def make_finetune_plan(cfg, options: PlanOptions | None = None) -> FinetunePlan:
    """Plan the fine-tune of ``cfg.env.world_model`` on ``cfg.trainer.devices`` ranks."""
    opt = options or PlanOptions()
    wm_env = to_container(cfg.env)
    wm_cfg = dict(wm_env.get("world_model") or {})
    height = int(wm_cfg.get("height") or wm_env.get("height"))
    width = int(wm_cfg.get("width") or wm_env.get("width"))
    devices, nodes = int(cfg.trainer.get("devices", 1)), int(cfg.trainer.get("num_nodes", 1))
    ft = finetune_config(devices, nodes)
    n = _shard_group(ft)
    clips = int(opt.finetune_clips or ft.data.batch_size)
    train_action = bool(ft.module.train_action_modules)
    roots = [r.removeprefix("model.") for r in ft.strategy.root_modules]
    wrap = list(ft.strategy.wrap_classes)
    frames = CONDITION_FRAMES + CHUNK
    ranks = {"full": None, "lora": opt.lora_rank}

    def measure(mode: str) -> tuple[dict, dict]:
        model = finetune_model(wm_cfg, ranks[mode], train_action)
        layout = shard_layout(model, roots, wrap)
        acts = {}
        for ckpt in (False, True):
            if ckpt:
                model.transformer.enable_gradient_checkpointing()
            acts[ckpt] = trace_world_model_training(model, clips, height, width, frames,
                                                    CONDITION_FRAMES)
        return layout, acts

    params, activations, roles, fits = {}, {}, {}, {}
    for mode in MODES:
        key = [mode, ranks[mode], train_action, roots, wrap, clips, height, width, wm_cfg]
        layout, acts = cached("finetune", key, lambda m=mode: measure(m))
        params[mode] = layout
        for ckpt, trace in acts.items():
            activations[(mode, ckpt)] = trace
            for states, s in (("param dtype", layout["e"]), ("fp32", 4)):
                note = (f"{mode}{f' rank {ranks[mode]}' if ranks[mode] else ''}, FSDP over {n}, "
                        f"{clips} clip(s) of {frames} frames, checkpointing "
                        f"{'on' if ckpt else 'off'}, AdamW states {states}")
                role = rank_bytes(layout, n, trace["working"], s, note)
                roles[(mode, ckpt, states)] = role
                fits[(mode, ckpt, states)] = {g: role.peak <= opt.headroom * g * GB
                                              for g in opt.device_sizes_gb}
    header = dict(devices=devices, shard_group=n, clips=clips, frames=frames, height=height,
                  width=width, lora_rank=opt.lora_rank, lora_targets=list(DIT_LORA_TARGETS),
                  train_action_modules=train_action, roots=roots, wrap_classes=wrap,
                  param_dtype="bfloat16", adamw_state_dtype="param dtype (bfloat16)",
                  master_weights="none", reduce_dtype=str(ft.strategy.reduce_dtype),
                  configured_checkpointing=bool(ft.module.gradient_checkpointing))
    return FinetunePlan(header, params, activations, roles, opt, fits)
