"""Memory plan for the real sizes, from modules built on the meta device (``scripts/plan.py``).

The policy, the world model (Wan DiT + VAE + action modules) and the reward model are built on
``torch.device("meta")``: every parameter has its shape and dtype, no weight is read or
allocated. An absent checkpoint directory is no error: the architecture then comes from the
config (``policy``: ``openvla_7b_config`` or ``policy.config``; world model: the
``transformer`` / ``vae`` / ``action`` keys of ``env.world_model``). Parameter counts
are sums of ``numel`` over the built modules.

Notation: P parameters, e bytes per element of the parameter dtype, N the FSDP shard group
(``trainer.devices`` for ``strategy.shard_size: auto``; 1 without an FSDP strategy), b the
micro-batch (``algorithm.micro_batch``), B the envs one env actor steps at once. GB = 1e9 bytes.

Trainer policy (per device)
  weights e P / N, grads e P / N, AdamW m + v in float32 8 P / N, float32 master weights
  4 P / N when e < 4. FSDP transients: the all-gathered root group (parameters outside the wrap
  units) + two gathered units (the one computing, the prefetched one) in e bytes + one unit's
  unsharded float32 gradient (the reduce-scatter input). Units = the policy's
  ``fsdp_wrap_classes`` (Llama decoder layer, ViT block), as ``strategy.wrap_classes`` should
  list them.
  Activations, bytes autograd keeps for backward for one micro-batch (the per-layer count of
  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  redone for these layers: no dropout, fused SDPA (flash / memory-efficient) so no s^2 term;
  tests/test_plan.py checks both counts against what autograd saves on CPU's fused SDPA):
    Llama layer, per token: e (6h + 2kv + 4I) + 4 (2h) + 8 + 4a
      e: each RMSNorm's normalised input (before its weight) and output = the q/k/v and MLP
         inputs (4h), roped q (h), k and v as SDPA gets them (kv each; = h, as transformers
         repeats grouped heads when a mask is given), the SDPA output = o_proj input (h),
         gate, SiLU(gate), up and the down_proj input (I each);
      4 (2h) + 8: the RMSNorms' float32 upcast inputs and rsqrt; 4a: the SDPA logsumexp.
    ViT block, per token: e (10d + 2m) with LayerScale (DINOv2), e (8d + 2m) without (SigLIP),
      + 4 heads (logsumexp) + 4e (LayerNorm mean/rstd); Prismatic runs depth - 1 blocks.
    projector, per patch: e (Dv + 8 Dv + 2 D); the rest (final norm, lm_head input) (4 + e) h.
  Not counted: the attention mask (one [b, 1, 1, s] tensor shared by all layers; a kernel that
  pads it per call adds < 0.3 GB at b = 32) and the 56 x 256 action logits.
  s = patches (+ proprio) + ``plan.prompt_tokens`` (prompt incl. BOS, default 64: LIBERO
  instructions in the OFT template tokenise to fewer) + chunk * action_dim (+ stop token).
  Gradient checkpointing on: a layer keeps only its input (e h per token), plus the layer that
  is recomputed in backward; off: every layer's activations. Both add one Llama layer's
  activations as the backward working set.

Rollout policy (each policy actor): a full copy e P; one forward's working set at batch B:
  e B [s (4h + 3I) + n (4d + 2m)] (a Llama layer's MLP, the largest ViT block). No KV cache:
  OFT decodes its 56 action tokens in one forward.

World model (each env actor): weights and buffers in their dtypes (DiT and action modules in
  ``dtype``, with diffusers' float32-kept DiT modules as ``from_pretrained`` keeps them; VAE in
  ``vae_dtype``); episode state (uint8 frames, the anchor's cached VAE encoder state); and
  the working set of one ``chunk_step``, TRACED on the meta device: encode the 4 condition
  frames after the cached anchor, the DiT forward (one per denoising step; each step's working
  set is the same, so one step is traced), decode all 13 frames, at batch B and 256x256. The
  trace counts the bytes of every tensor storage created and frees them when the last tensor
  on the storage dies (``LiveBytes``); its peak is the working set. No KV cache: each step is a
  full forward over the latent tokens + the text and action context.
Reward: weights; working set traced as above on min(B chunk, reward.batch_size) frames.

Placements, per device (R = resident: weights, optimizer state, episode state; T = the
working set of the role's phase):
  collocated, idle roles offloaded (GRPOModule offloads itself, the actor for env or
    policy): max over roles of R + T;
  collocated, nothing offloaded: sum of R + max of T (the phases take turns);
  disaggregated: trainer, env actor (+ reward) and policy actor on their own devices;
  hybrid: as disaggregated (docs/trainer.md, "Placement"), env and policy step B / stages envs at once
    (n/a when B does not split into stages of whole groups, as config.validate requires).
A placement fits a device of S GB when peak <= headroom * S (``plan.headroom``, default 0.9:
the plan does not count the CUDA context, allocator caching or conv workspaces). Sizes are
taken as 1e9-byte GB, which is conservative ("80 GB" cards hold about 85e9 bytes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from strategies.live_bytes import LiveBytes
from wmrl.config import to_container
from wmrl.policies.openvla_oft import build_policy_meta
from wmrl.rewards.resnet import ResNetSuccessReward, build_classifier, frames_to_input
from wmrl.world_model.action_wan import ActionConditioner, ActionWanModel, as_dtype

GB = 1e9
CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "conf")

# What `python scripts/plan.py` plans with no arguments: the real-size configs, the ResNet-18
# reward at the frame size, FSDP over 8 devices, and the WoVR recipe's 64 envs spread over
# the 8 trainer ranks (8 per rank). A user override of a key (or of its group) replaces its
# default here.
REAL_SIZE_DEFAULTS = (
    "policy=openvla_oft_7b",
    "env=wan22_ti2v_5b_libero",
    "reward=resnet",
    "reward.config.widths=[64,128,256,512]",
    "reward.config.image_size=null",
    "strategy=hybrid_shard",
    "trainer.devices=8",
    "rollout.num_envs=8",
)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def with_real_size_defaults(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """``REAL_SIZE_DEFAULTS`` the user did not override, then the user's overrides."""
    user = [_key(o) for o in overrides]
    keep = [d for d in REAL_SIZE_DEFAULTS
            if not any(_key(d) == u or _key(d).startswith(u + ".") for u in user)]
    return [*keep, *overrides]


def compose(overrides: list[str] | tuple[str, ...] = ()):
    """The planned config, composed in-process (tests); ``scripts/plan.py`` goes through
    ``hydra.main`` with the same defaults."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return hydra_compose("fit", overrides=with_real_size_defaults(list(overrides)))


@dataclass
class PlanOptions:
    """``+plan.<name>=...`` on the command line."""
    prompt_tokens: int = 64
    headroom: float = 0.9
    device_sizes_gb: tuple[int, ...] = (40, 80, 141)
    sweep_envs: tuple[int, ...] = (1, 8, 16, 32, 64)


# ---- meta-device builders ---------------------------------------------------------------------
_BUILT: dict[str, Any] = {}  # meta modules by (builder, config): planning twice builds once


def _cached(kind: str, cfg: Any, build):
    key = kind + json.dumps(cfg, sort_keys=True, default=str)
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


def build_policy(policy_cfg: dict) -> tuple[nn.Module, str]:

    if policy_cfg.get("_target_") != "wmrl.policies.openvla_oft.build_policy":
        raise ValueError(f"plan: policy._target_ {policy_cfg.get('_target_')!r} is not the "
                         "OpenVLA-OFT policy (wmrl.policies.openvla_oft.build_policy)")
    path = policy_cfg.get("pretrained_path")
    if path and os.path.isfile(os.path.join(str(path), "config.json")):
        source = f"config.json of {path}"
    elif policy_cfg.get("config") is not None:
        source = "policy.config"
    elif path:
        source = f"published 7B architecture (no checkpoint at {path})"
    else:
        source = "tiny config"
    args = {k: v for k, v in policy_cfg.items() if k != "_target_"}
    return build_policy_meta(**args), source


def _keep_fp32(model: nn.Module, names: list[str] | None) -> None:
    """Float32 for the parameters under diffusers' ``_keep_in_fp32_modules`` (matched on the
    parameter name's parts), as ``from_pretrained`` loads them."""
    for name, param in model.named_parameters():
        if names and any(n in name.split(".") for n in names):
            param.data = param.data.float()


def build_world_model(wm_cfg: dict) -> tuple[nn.Module, str]:
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.utils import logging as dlog

    dt = as_dtype(wm_cfg.get("dtype", "float32"))
    vdt = as_dtype(wm_cfg.get("vae_dtype", "float32"))
    root = Path(str(wm_cfg["path"])) if wm_cfg.get("path") else None
    files = ("transformer/config.json", "vae/config.json", "action/config.json")
    verbosity = dlog.get_verbosity()
    dlog.set_verbosity_error()  # the "should be kept in float32" notice: handled below
    try:
        if root is not None and all((root / f).is_file() for f in files):
            acfg = json.loads((root / "action" / "config.json").read_text())
            shift = acfg.pop("flow_shift", 5.0)
            with torch.device("meta"):
                transformer = WanTransformer3DModel.from_config(
                    WanTransformer3DModel.load_config(str(root / "transformer")))
                vae = AutoencoderKLWan.from_config(AutoencoderKLWan.load_config(str(root / "vae")))
                model = ActionWanModel(transformer, vae, ActionConditioner(**acfg), shift=shift)
            model.transformer.to(dt)
            model.action.to(dt)
            model.vae.to(vdt)
            source = f"config.json files of {root}"
        else:
            if "transformer" not in wm_cfg or "vae" not in wm_cfg:
                raise ValueError(
                    f"plan: env.world_model.path={wm_cfg.get('path')!r} is not an "
                    "action-Wan directory and the config has no transformer/vae architecture "
                    "to plan from (see conf/env/wan22_ti2v_5b_libero.yaml)")
            vae_cfg = dict(wm_cfg["vae"])
            z = int(vae_cfg.get("z_dim", 16))
            vae_cfg.setdefault("latents_mean", [0.0] * z)  # shapes only: a checkpoint's
            vae_cfg.setdefault("latents_std", [1.0] * z)  # vae/config.json has the real ones
            with torch.device("meta"):
                model = ActionWanModel.from_config({**wm_cfg, "vae": vae_cfg})
            where = f"no checkpoint at {root}" if root is not None else "no path"
            source = f"architecture in env.world_model ({where})"
    finally:
        dlog.set_verbosity(verbosity)
    if dt != torch.float32:
        _keep_fp32(model.transformer, getattr(model.transformer, "_keep_in_fp32_modules", None))
    return model.eval().requires_grad_(False), source


def build_reward(reward_cfg: dict | None) -> tuple[nn.Module | None, Any, str]:
    """(classifier on meta, the reward object, source); (None, None, why) when the reward
    is not a ResNet classifier (a VLM reward is not planned)."""
    if not reward_cfg:
        return None, None, "no reward model"
    from hydra.utils import instantiate

    reward = instantiate(reward_cfg, _convert_="all")  # cheap: the model is built lazily
    if not isinstance(reward, ResNetSuccessReward):
        return None, None, f"{type(reward).__name__} is not planned (ResNet rewards only)"
    source = "reward.config"
    ckpt = Path(reward.checkpoint) if reward.checkpoint else None
    if ckpt is not None and (ckpt / "config.json").is_file():
        reward._adopt_checkpoint_config(json.loads((ckpt / "config.json").read_text()))
        source = f"config.json of {ckpt}"
    with torch.device("meta"):
        model = build_classifier(reward.arch, reward.config)
    return model.eval().requires_grad_(False), reward, source


# ---- meta-device tracing -------------------------------------------------------------------
@torch.no_grad()
def trace_world_model(model: nn.Module, batch: int, height: int, width: int,
                      condition_frames: int, chunk: int, action_dim: int = 7) -> dict[str, int]:
    """Bytes of one ``chunk_step``'s model calls at ``batch`` envs (fast path, meta device):
    ``anchor`` = the cached VAE encoder state of frame 0 (held for the episode), ``working`` =
    the peak above it while encoding the condition frames, denoising (one step: every step's
    working set is the same) and decoding all frames."""
    m = "meta"
    with LiveBytes() as live:
        frame0 = torch.zeros(batch, 3, 1, height, width, device=m)
        anchor = model.encode_anchor(frame0)
        del frame0
        held = live.live
        live.reset_peak()
        rest = torch.zeros(batch, 3, condition_frames - 1, height, width, device=m)
        cond = model.encode_with_anchor(anchor, rest)
        del rest
        h, w = model.latent_hw(height, width)
        noise = torch.zeros(batch, model.latent_channels, chunk // model.temporal_ratio, h, w,
                            device=m)
        actions = torch.zeros(batch, condition_frames + chunk, action_dim, device=m)
        new = model.generate(cond, actions, noise, 1)
        video = model.decode(torch.cat([cond, new], 2))
        del video
        peak = live.peak
    return {"anchor": held, "working": peak - held}


@torch.no_grad()
def trace_reward(model: nn.Module, frames: int, height: int, width: int,
                 image_size=None) -> int:
    """Peak bytes of scoring ``frames`` uint8 frames (input conversion + forward)."""
    with LiveBytes() as live:
        u8 = torch.zeros(frames, height, width, 3, dtype=torch.uint8, device="meta")
        x = frames_to_input(u8, image_size)
        model(x)
        return live.peak


# ---- analytic transformer activations --------------------------------------------------------
def _nbytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size()
               for t in [*module.parameters(), *module.buffers()])


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def policy_dims(policy: nn.Module, prompt_tokens: int) -> dict[str, Any]:
    """The sizes the activation formulas need, read from the built policy."""
    tc = policy.text_config
    h, n_heads = tc.hidden_size, tc.num_attention_heads
    # k and v as SDPA saves them: transformers repeats grouped kv heads before SDPA when a mask
    # is passed (the policy always passes one), so they are h wide even for a GQA model
    kv = h
    vits = []
    vb = policy.vision_backbone
    for vit in (vb.featurizer, getattr(vb, "fused_featurizer", None)):
        if vit is None:
            continue
        blk = vit.blocks[0]
        vits.append(dict(d=vit.embed_dim, m=blk.mlp.fc1.out_features, heads=vit.cfg.num_heads,
                         blocks=vit.cfg.depth - 1, tokens=vit.num_patches + vit.num_prefix_tokens,
                         layerscale=bool(vit.cfg.init_values)))
    wm = policy.config["wmrl"]
    n_img = vb.num_images
    patches = policy.num_patches + (1 if policy.proprio_dim else 0)
    s = patches + prompt_tokens + policy.chunk * policy.action_dim + int(
        bool(wm["append_stop_token"]))
    proj = policy.projector
    proj_elems = proj.fc1.in_features + 2 * proj.fc1.out_features + 2 * proj.fc2.out_features
    return dict(h=h, I=tc.intermediate_size, L=tc.num_hidden_layers, a=n_heads, kv=kv, s=s,
                vits=vits, n_img=n_img, patches=policy.num_patches, proj_elems=proj_elems,
                e=next(policy.parameters()).element_size())


def llama_layer_bytes(d: dict, b: int) -> int:
    """Bytes one Llama decoder layer keeps for backward (module docstring)."""
    e, h, kv, i, a = d["e"], d["h"], d["kv"], d["I"], d["a"]
    return d["s"] * b * (e * (6 * h + 2 * kv + 4 * i) + 4 * 2 * h + 8 + 4 * a)


def vit_block_bytes(v: dict, e: int, b: int, n_img: int) -> int:
    per_token = (e * ((10 if v["layerscale"] else 8) * v["d"] + 2 * v["m"]) + 4 * v["heads"]
                 + 4 * e)
    return per_token * v["tokens"] * b * n_img


def train_activation_bytes(d: dict, b: int, checkpointing: bool) -> dict[str, int]:
    """Activations of one micro-batch of ``b`` chunk-samples (module docstring)."""
    e, s, h = d["e"], d["s"], d["h"]
    layer = llama_layer_bytes(d, b)
    llm = d["L"] * (e * h * s * b if checkpointing else layer)
    vit = 0
    for v in d["vits"]:
        block = vit_block_bytes(v, e, b, d["n_img"])
        kept = e * v["d"] * v["tokens"] * b * d["n_img"] if checkpointing else block
        vit += v["blocks"] * kept + (block if checkpointing else 0)
    rest = e * d["proj_elems"] * d["patches"] * b + (4 + e) * h * s * b
    return {"llm": llm, "vision": vit, "rest": rest, "working": layer,
            "total": llm + vit + rest + layer, "seq": s}


def rollout_activation_bytes(d: dict, batch: int) -> int:
    e, s = d["e"], d["s"]
    vit = max((v["tokens"] * d["n_img"] * (4 * v["d"] + 2 * v["m"]) for v in d["vits"]),
              default=0)
    return e * batch * (s * (4 * d["h"] + 3 * d["I"]) + vit)


# ---- the plan -------------------------------------------------------------------------------
@dataclass
class Role:
    """One role's memory on its device: resident items and working-set items (bytes)."""
    name: str
    resident: dict[str, int] = field(default_factory=dict)
    working: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def r(self) -> int:
        return sum(self.resident.values())

    @property
    def t(self) -> int:
        return sum(self.working.values())

    @property
    def peak(self) -> int:
        return self.r + self.t


@dataclass
class Placement:
    name: str
    devices: int
    peak: int | None  # None: the placement cannot run this config (``binding`` says why)
    binding: str
    fits: dict[int, bool]


@dataclass
class Plan:
    header: dict[str, Any]
    params: dict[str, dict[str, Any]]
    roles: dict[str, Role]
    activations: dict[str, dict[str, int]]
    env_sweep: dict[int, int]  # envs per actor -> env actor (world model + reward) peak
    placements: list[Placement]
    options: PlanOptions


def _shard_group(cfg) -> int:
    strategy = cfg.get("strategy") or {}
    devices = int(cfg.trainer.get("devices", 1))
    nodes = int(cfg.trainer.get("num_nodes", 1))
    if "Shard" not in str(strategy.get("_target_", "")):
        return 1  # no FSDP strategy: every rank holds the whole trainer state
    size = strategy.get("shard_size", "auto")
    if size == "auto":
        return devices
    if size == "world":
        return devices * nodes
    return int(size)


def _fsdp_units(policy: nn.Module) -> tuple[int, int]:
    """(largest wrap unit, root group) in parameters."""
    classes = tuple(getattr(policy, "fsdp_wrap_classes", ()))
    units = [_numel(m) for m in policy.modules() if classes and isinstance(m, classes)]
    return max(units, default=0), _numel(policy) - sum(units)


def make_plan(cfg, options: PlanOptions | None = None) -> Plan:
    """Build the three models on meta and work out every figure (see the module docstring)."""
    opt = options or PlanOptions()
    policy_cfg = to_container(cfg.policy)
    wm_env = to_container(cfg.env)
    wm_cfg = dict(wm_env.get("world_model") or {})
    reward_cfg = to_container(cfg.reward) if cfg.get("reward") else None
    r = cfg.rollout
    devices = int(cfg.trainer.get("devices", 1))
    n_shard = _shard_group(cfg)
    envs_per_actor = int(r.num_envs) // int(r.num_env_workers)
    stages = max(2, int(r.get("pipeline_stages", 1)))
    micro = int(cfg.algorithm.micro_batch)
    ckpt = bool(policy_cfg.get("gradient_checkpointing", False))
    height = int(wm_cfg.get("height") or wm_env.get("height"))
    width = int(wm_cfg.get("width") or wm_env.get("width"))
    cond_frames = int(wm_env.get("condition_frames", 5))
    chunk = int(r.chunk)

    shape_keys = {k: v for k, v in policy_cfg.items()  # what does not change the build
                  if k not in ("gradient_checkpointing", "seed", "unnorm_key")}
    policy, policy_src = _cached("policy", shape_keys, lambda: build_policy(policy_cfg))
    wm, wm_src = _cached("world_model", wm_cfg, lambda: build_world_model(wm_cfg))
    reward_model, reward, reward_src = _cached("reward", reward_cfg,
                                               lambda: build_reward(reward_cfg))

    # parameters, counted on the meta modules
    p = _numel(policy)
    e = next(policy.parameters()).element_size()
    params = {
        "policy": dict(params=p, dtype=str(next(policy.parameters()).dtype).replace("torch.", ""),
                       bytes=_nbytes(policy)),
        "dit": dict(params=_numel(wm.transformer), bytes=_nbytes(wm.transformer),
                    dtype=str(wm.transformer.dtype).replace("torch.", "")),
        "vae": dict(params=_numel(wm.vae), bytes=_nbytes(wm.vae),
                    dtype=str(wm.vae.dtype).replace("torch.", "")),
        "action": dict(params=_numel(wm.action), bytes=_nbytes(wm.action),
                       dtype=str(next(wm.action.parameters()).dtype).replace("torch.", "")),
    }
    if reward_model is not None:
        params["reward"] = dict(params=_numel(reward_model), bytes=_nbytes(reward_model),
                                dtype=str(next(reward_model.parameters()).dtype).replace(
                                    "torch.", ""))

    # trainer
    dims = policy_dims(policy, opt.prompt_tokens)
    acts = {"on": train_activation_bytes(dims, micro, True),
            "off": train_activation_bytes(dims, micro, False)}
    unit, root = _fsdp_units(policy)
    trainer = Role("trainer policy", note=f"FSDP over {n_shard}, micro_batch {micro}, seq "
                   f"{dims['s']}, gradient checkpointing {'on' if ckpt else 'off'}")
    trainer.resident["weights"] = e * p // n_shard
    trainer.resident["adamw_m_v_fp32"] = 8 * p // n_shard
    trainer.resident["master_weights_fp32"] = 4 * p // n_shard if e < 4 else 0
    trainer.working["grads"] = e * p // n_shard
    trainer.working["fsdp_gather_reduce"] = (e * (root + 2 * unit) + 4 * unit) if n_shard > 1 else 0
    trainer.working["activations"] = acts["on" if ckpt else "off"]["total"]

    def rollout_role(batch: int) -> Role:
        role = Role("rollout policy", note=f"{batch} envs per forward")
        role.resident["weights"] = _nbytes(policy)
        role.working["activations"] = rollout_activation_bytes(dims, batch)
        return role

    def world_model_role(held: int, step: int) -> Role:
        traced = _cached("trace", [id(wm), step, height, width, cond_frames, chunk],
                         lambda: trace_world_model(wm, step, height, width, cond_frames, chunk))
        role = Role("world model", note=f"{held} envs, {step} per step")
        role.resident["dit"] = params["dit"]["bytes"]
        role.resident["vae"] = params["vae"]["bytes"]
        role.resident["action_modules"] = params["action"]["bytes"]
        # uint8 condition frames + observation, the anchor frame's cached VAE encoder state
        role.resident["episode_state"] = (held * (cond_frames + 1) * height * width * 3
                                          + traced["anchor"] * held // step)
        role.working["chunk_step"] = traced["working"]
        return role

    def reward_role(step: int) -> Role:
        role = Role("reward", note="not planned")
        if reward_model is not None:
            frames = min(step * chunk, int(getattr(reward, "batch_size", 256)))
            role.note = f"{frames} frames per forward"
            role.resident["weights"] = params["reward"]["bytes"]
            size = reward.config.get("image_size")
            role.working["scoring"] = _cached(
                "trace_reward", [id(reward_model), frames, height, width, size],
                lambda: trace_reward(reward_model, frames, height, width, size))
        return role

    def env_actor(held: int, step: int) -> Role:
        """World model + reward in one actor: resident both, working sets take turns."""
        wm_role, rw_role = world_model_role(held, step), reward_role(step)
        role = Role("env actor", note=f"world model + reward, {held} envs, {step} per step")
        role.resident = {**wm_role.resident, **{f"reward_{k}": v
                                                for k, v in rw_role.resident.items()}}
        role.working["max(chunk_step, scoring)"] = max(wm_role.t, rw_role.t)
        return role

    b = envs_per_actor
    group = int(r.group_size)
    hybrid_ok = b % (stages * group) == 0
    stage = b // stages if hybrid_ok else b
    roles = {"trainer": trainer, "rollout": rollout_role(b),
             "world_model": world_model_role(b, b), "reward": reward_role(b),
             "env": env_actor(b, b)}
    if hybrid_ok:
        roles["rollout_hybrid"] = rollout_role(stage)
        roles["env_hybrid"] = env_actor(b, stage)
    sweep = {n: env_actor(n, n).peak for n in opt.sweep_envs}

    w, rw = int(r.num_env_workers), int(r.num_rollout_workers)
    env, rollout = roles["env"], roles["rollout"]

    def placement(name: str, devs: int, parts: dict[str, int]) -> Placement:
        peak = max(parts.values())
        fits = {s: peak <= opt.headroom * s * GB for s in opt.device_sizes_gb}
        return Placement(name, devs, peak, max(parts, key=parts.get), fits)

    placements = [
        placement("collocated, idle roles offloaded", devices,
                  {"trainer": trainer.peak, "env actor": w * env.peak,
                   "policy actor": w * rollout.peak}),
        placement("collocated, nothing offloaded", devices, {"all roles": (
            trainer.r + w * (env.r + rollout.r) + max(trainer.t, w * max(env.t, rollout.t)))}),
        placement("disaggregated", devices * (1 + w + rw),
                  {"trainer": trainer.peak, "env actor": env.peak, "policy actor": rollout.peak}),
    ]
    name = f"hybrid ({stages} stages)"
    if hybrid_ok:
        placements.append(placement(name, devices * (1 + w + rw), {
            "trainer": trainer.peak, "env actor": roles["env_hybrid"].peak,
            "policy actor": roles["rollout_hybrid"].peak}))
    else:
        placements.append(Placement(name, devices * (1 + w + rw), None, (
            f"n/a: {b} envs per actor do not split into {stages} stages of whole groups of "
            f"{group}"), {s: False for s in opt.device_sizes_gb}))
    header = dict(devices=devices, shard_group=n_shard, micro_batch=micro,
                  envs_per_actor=b, env_workers=w, rollout_workers=rw, stages=stages,
                  checkpointing=ckpt, seq=dims["s"], prompt_tokens=opt.prompt_tokens,
                  frames=cond_frames + chunk, height=height, width=width,
                  policy_source=policy_src, world_model_source=wm_src,
                  reward_source=reward_src, fsdp_unit_params=unit, fsdp_root_params=root)
    return Plan(header, params, roles, {"on": acts["on"], "off": acts["off"]}, sweep,
                placements, opt)


# ---- output -------------------------------------------------------------------------------------
def _gb(n: int | float) -> str:
    return f"{n / GB:8.2f}"


def format_table(plan: Plan) -> str:
    h, pr, ro = plan.header, plan.params, plan.roles
    out = [
        f"wmrl memory plan (GB = 1e9 bytes, tensors only; formulas in wmrl/plan/plan.py): "
        f"trainer.devices={h['devices']}, FSDP shard group {h['shard_group']}, micro_batch "
        f"{h['micro_batch']}, {h['envs_per_actor']} envs per env actor, {h['frames']} frames at "
        f"{h['height']}x{h['width']}",
        f"  policy:      {h['policy_source']}",
        f"  world model: {h['world_model_source']}",
        f"  reward:      {h['reward_source']}",
        "",
        "models (parameters summed over the modules built on the meta device)",
    ]
    names = {"policy": "policy OpenVLA-OFT", "dit": "world model DiT",
             "vae": "world model VAE", "action": "world model action modules",
             "reward": "reward ResNet"}
    for k, v in pr.items():
        out.append(f"  {names[k]:<28}{v['params']:>16,} params  {v['dtype']:<9}"
                   f"{_gb(v['bytes'])} GB")
    out += ["", f"per role, per device{'GB':>48}"]

    def rows(key: str) -> None:
        role = ro[key]
        out.append(f"  {role.name}  ({role.note})")
        for k, v in role.resident.items():
            out.append(f"    {k:<54}{_gb(v)}   resident")
        for k, v in role.working.items():
            out.append(f"    {k:<54}{_gb(v)}   working set")
        out.append(f"    {'peak':<54}{_gb(role.peak)}")

    rows("trainer")
    for state in ("on", "off"):
        x = plan.activations[state]
        label = (f"activations, checkpointing {state}: llm {x['llm'] / GB:.2f} + vision "
                 f"{x['vision'] / GB:.2f} + rest {x['rest'] / GB:.2f} + layer {x['working'] / GB:.2f}")
        out.append(f"      {label:<52}{_gb(x['total'])}")
    for key in ("rollout", "world_model", "reward", "env"):
        rows(key)
    out.append("  env actor peak by envs per actor: " + ", ".join(
        f"{n}: {v / GB:.1f}" for n, v in plan.env_sweep.items()))
    sizes = plan.options.device_sizes_gb
    out += ["", f"placements: peak per device; fits = peak <= {plan.options.headroom:g} x size",
            f"  {'placement':<34}{'devices':>8}{'peak GB':>9}" +
            "".join(f"{str(s) + ' GB':>8}" for s in sizes) + "  binding"]
    for pl in plan.placements:
        peak = "n/a" if pl.peak is None else f"{pl.peak / GB:.2f}"
        out.append(f"  {pl.name:<34}{pl.devices:>8}{peak:>9}" +
                   "".join(f"{('fits' if pl.fits[s] else '-'):>8}" for s in sizes) +
                   f"  {pl.binding}")
    return "\n".join(out)


def json_lines(plan: Plan) -> list[str]:
    """One JSON object per figure."""
    lines = [dict(figure="params", model=k, **v) for k, v in plan.params.items()]
    for key, role in plan.roles.items():
        for kind, items in (("resident", role.resident), ("working", role.working)):
            lines += [dict(figure="bytes", role=key, item=k, kind=kind, bytes=int(v),
                           gb=round(v / GB, 3)) for k, v in items.items()]
        lines.append(dict(figure="role_peak", role=key, bytes=int(role.peak),
                          gb=round(role.peak / GB, 3), note=role.note))
    for state in ("on", "off"):
        x = plan.activations[state]
        lines.append(dict(figure="trainer_activations", checkpointing=state == "on",
                          micro_batch=plan.header["micro_batch"], seq=x["seq"],
                          bytes=int(x["total"]), gb=round(x["total"] / GB, 3)))
    lines += [dict(figure="env_actor_peak", envs_per_actor=n, bytes=int(v), gb=round(v / GB, 3))
              for n, v in plan.env_sweep.items()]
    for pl in plan.placements:
        lines.append(dict(figure="placement", placement=pl.name, devices=pl.devices,
                          bytes=None if pl.peak is None else int(pl.peak),
                          gb=None if pl.peak is None else round(pl.peak / GB, 3),
                          binding=pl.binding, fits={str(s): f for s, f in pl.fits.items()}))
    lines.append(dict(figure="setup", **plan.header))
    return [json.dumps(x) for x in lines]


def options_from(cfg) -> PlanOptions:
    """``PlanOptions`` from the optional ``plan`` key (``+plan.prompt_tokens=128``)."""
    extra = to_container(cfg.get("plan") or {})
    return PlanOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()})
