"""The memory plan: bytes per role and per placement, per device (``make_plan``).

Notation: P parameters, e bytes per element of the parameter dtype, N the FSDP shard group
(``trainer.devices`` for ``strategy.shard_size: auto``; 1 without an FSDP strategy), b the
micro-batch (``algorithm.micro_batch``), B the envs one env actor steps at once. GB = 1e9 bytes.

Trainer policy (per device), exactly what ``GRPOModule`` runs: every parameter in its own
  dtype (``policy.dtype``; LoRA adapters float32) / N; the trained parameters T (all of them,
  or LoRA's adapters) in ``algorithm.optimizer_dtype``: their gradients t / N and AdamW's m + v
  2 t / N (t = their bytes). float32 trained weights are the master weights (no extra copy);
  the computing copy is FSDP2's gathered units in c bytes (``strategy.param_dtype`` or the
  Trainer's precision: 2 for bf16, else e). FSDP transients: the all-gathered root group
  (parameters outside the wrap units) + two gathered units (the one computing, the prefetched
  one) in c bytes + one unit's unsharded float32 gradient of its trained parameters (the
  reduce-scatter input). Units = the policy's ``fsdp_wrap_classes`` (Llama decoder layer, ViT
  block), as ``strategy.wrap_classes`` should list them. Activations of one micro-batch b:
  ``wmrl/plan/activations.py``.

Rollout policy (each policy actor): a full copy in ``rollout.policy_dtype`` (null: e; LoRA
  adapters float32); one forward's working set at batch B (``wmrl/plan/activations.py``).

World model (each env actor): weights and buffers in their dtypes (DiT and action modules in
  ``dtype``, with diffusers' float32-kept DiT modules as ``from_pretrained`` keeps them; VAE in
  ``vae_dtype``); episode state (uint8 frames, the anchor's cached VAE encoder state); and
  the working set of one ``chunk_step``, traced on the meta device (``wmrl/plan/activations.py``).
Reward: weights; working set traced on min(B chunk, reward.batch_size) frames.

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

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from strategies.precision import param_dtype_for_precision
from wmrl.algorithms.config import check_optimizer_dtype
from wmrl.build import to_container
from wmrl.plan.activations import (
    policy_dims,
    rollout_activation_bytes,
    trace_reward,
    trace_world_model,
    train_activation_bytes,
)
from wmrl.plan.meta import build_policy, build_reward, build_world_model, cached, nbytes, numel
from wmrl.weights.dtypes import dtype_name, to_dtype
from wmrl.weights.lora import is_adapter_key

GB = 1e9


@dataclass
class PlanOptions:
    """``+plan.<name>=...`` on the command line."""
    prompt_tokens: int = 64
    headroom: float = 0.9
    device_sizes_gb: tuple[int, ...] = (40, 80, 141)
    sweep_envs: tuple[int, ...] = (1, 8, 16, 32, 64)
    finetune_clips: int | None = None  # world-model fine-tune: clips per rank (None: data.batch_size)
    lora_rank: int = 32  # world-model fine-tune: the LoRA line's rank (the fork's)


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
class PlacementMemory:
    """One placement's memory per device: the devices it takes, the peak on the fullest one,
    the role (or roles) that set that peak (``binding``), and which device sizes it fits."""
    name: str
    devices: int
    peak: int | None  # None: the placement cannot run this config (``binding`` says why)
    binding: str
    fits: dict[int, bool]


@dataclass
class MemoryPlan:
    """Every figure of the plan (``make_plan``): the setup (``header``), parameter counts,
    bytes per role, the trainer's activations, the env-actor sweep and the placements."""
    header: dict[str, Any]
    params: dict[str, dict[str, Any]]
    roles: dict[str, Role]
    activations: dict[str, dict[str, int]]
    env_sweep: dict[int, int]  # envs per actor -> env actor (world model + reward) peak
    placements: list[PlacementMemory]
    options: PlanOptions


def _shard_group(cfg) -> int:
    """N: the ranks one trainer state is sharded over."""
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


def _fsdp_units(policy: nn.Module) -> tuple[int, int, int]:
    """(largest wrap unit, root group, most trained parameters of a unit) in parameters."""
    classes = tuple(getattr(policy, "fsdp_wrap_classes", ()))
    units = [m for m in policy.modules() if classes and isinstance(m, classes)]
    sizes = [numel(m) for m in units]
    trained = [sum(q.numel() for q in m.parameters() if q.requires_grad) for m in units]
    return max(sizes, default=0), numel(policy) - sum(sizes), max(trained, default=0)


def _compute_bytes(cfg, e: int) -> int:
    """c: bytes per element of the computing copy (FSDP2's gathered units, autocast), as
    ``HybridShardStrategy.compute_param_dtype`` picks it: ``strategy.param_dtype``, else the
    Trainer's precision, else the parameters' own."""
    name = (cfg.get("strategy") or {}).get("param_dtype")
    dtype = (to_dtype(name, "strategy.param_dtype") if name
             else param_dtype_for_precision(cfg.trainer.get("precision")))
    return dtype.itemsize if dtype is not None else e


def make_plan(cfg, options: PlanOptions | None = None) -> MemoryPlan:
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
    policy, policy_src = cached("policy", shape_keys, lambda: build_policy(policy_cfg))
    wm, wm_src = cached("world_model", wm_cfg, lambda: build_world_model(wm_cfg))
    reward_model, reward, reward_src = cached("reward", reward_cfg,
                                               lambda: build_reward(reward_cfg))

    # parameters, counted on the meta modules
    p = numel(policy)
    e = next(policy.parameters()).element_size()
    params = {
        "policy": dict(params=p, dtype=dtype_name(next(policy.parameters()).dtype),
                       bytes=nbytes(policy)),
        "dit": dict(params=numel(wm.transformer), bytes=nbytes(wm.transformer),
                    dtype=dtype_name(wm.transformer.dtype)),
        "vae": dict(params=numel(wm.vae), bytes=nbytes(wm.vae),
                    dtype=dtype_name(wm.vae.dtype)),
        "action": dict(params=numel(wm.action), bytes=nbytes(wm.action),
                       dtype=dtype_name(next(wm.action.parameters()).dtype)),
    }
    if reward_model is not None:
        params["reward"] = dict(params=numel(reward_model), bytes=nbytes(reward_model),
                                dtype=dtype_name(next(reward_model.parameters()).dtype))

    # trainer
    dims = policy_dims(policy, opt.prompt_tokens)
    c = _compute_bytes(cfg, e)  # the trainer computes in c bytes (autocast, FSDP2 gathers)
    acts = {"on": train_activation_bytes({**dims, "e": c}, micro, True),
            "off": train_activation_bytes({**dims, "e": c}, micro, False)}
    unit, root, unit_trained = _fsdp_units(policy)
    optimizer_dtype = dtype_name(cfg.algorithm.get("optimizer_dtype", "float32"),
                                 "algorithm.optimizer_dtype")  # bf16: bfloat16
    check_optimizer_dtype(policy, optimizer_dtype)  # as GRPOModule: what would not run
    trained = [q for q in policy.parameters() if q.requires_grad]
    pt, bt = sum(q.numel() for q in trained), sum(q.numel() * q.element_size() for q in trained)
    trainer = Role("trainer policy", note=f"FSDP over {n_shard}, micro_batch {micro}, seq "
                   f"{dims['s']}, gradient checkpointing {'on' if ckpt else 'off'}, "
                   f"{pt:,} trained parameters in {optimizer_dtype}, computing in "
                   f"{'bfloat16' if c == 2 else 'float32'}")
    trainer.resident["weights"] = sum(q.numel() * q.element_size()
                                      for q in policy.parameters()) // n_shard
    trainer.resident[f"adamw_m_v_{optimizer_dtype}"] = 2 * bt // n_shard
    trainer.working["grads"] = bt // n_shard
    trainer.working["fsdp_gather_reduce"] = (c * (root + 2 * unit) + 4 * unit_trained
                                             if n_shard > 1 else 0)
    trainer.working["activations"] = acts["on" if ckpt else "off"]["total"]

    # the actors' copy: rollout.policy_dtype (null: the policy's own); adapters stay float32
    actor_dtype = r.get("policy_dtype")
    ra = to_dtype(actor_dtype, "rollout.policy_dtype").itemsize if actor_dtype else e
    actor_weights = sum(q.numel() * (q.element_size() if is_adapter_key(n) else ra)
                        for n, q in policy.named_parameters()) + sum(
        b.numel() * b.element_size() for b in policy.buffers())

    def rollout_role(batch: int) -> Role:
        role = Role("rollout policy", note=f"{batch} envs per forward")
        role.resident["weights"] = actor_weights
        role.working["activations"] = rollout_activation_bytes({**dims, "e": ra}, batch)
        return role

    def world_model_role(held: int, step: int) -> Role:
        traced = cached("trace", [id(wm), step, height, width, cond_frames, chunk],
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
            role.working["scoring"] = cached(
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

    def placement_memory(name: str, devs: int, parts: dict[str, int]) -> PlacementMemory:
        peak = max(parts.values())
        fits = {s: peak <= opt.headroom * s * GB for s in opt.device_sizes_gb}
        return PlacementMemory(name, devs, peak, max(parts, key=parts.get), fits)

    placements = [
        placement_memory("collocated, idle roles offloaded", devices,
                  {"trainer": trainer.peak, "env actor": w * env.peak,
                   "policy actor": w * rollout.peak}),
        placement_memory("collocated, nothing offloaded", devices, {"all roles": (
            trainer.r + w * (env.r + rollout.r) + max(trainer.t, w * max(env.t, rollout.t)))}),
        placement_memory("disaggregated", devices * (1 + w + rw),
                  {"trainer": trainer.peak, "env actor": env.peak, "policy actor": rollout.peak}),
    ]
    name = f"hybrid ({stages} stages)"
    if hybrid_ok:
        placements.append(placement_memory(name, devices * (1 + w + rw), {
            "trainer": trainer.peak, "env actor": roles["env_hybrid"].peak,
            "policy actor": roles["rollout_hybrid"].peak}))
    else:
        placements.append(PlacementMemory(name, devices * (1 + w + rw), None, (
            f"n/a: {b} envs per actor do not split into {stages} stages of whole groups of "
            f"{group}"), {s: False for s in opt.device_sizes_gb}))
    header = dict(devices=devices, shard_group=n_shard, micro_batch=micro,
                  envs_per_actor=b, env_workers=w, rollout_workers=rw, stages=stages,
                  checkpointing=ckpt, seq=dims["s"], prompt_tokens=opt.prompt_tokens,
                  frames=cond_frames + chunk, height=height, width=width,
                  policy_source=policy_src, world_model_source=wm_src,
                  reward_source=reward_src, fsdp_unit_params=unit, fsdp_root_params=root,
                  trained_params=pt, optimizer_dtype=optimizer_dtype,
                  compute_dtype="bfloat16" if c == 2 else "float32",
                  lora=bool(policy_cfg.get("lora")))
    return MemoryPlan(header, params, roles, {"on": acts["on"], "off": acts["off"]}, sweep,
                placements, opt)
