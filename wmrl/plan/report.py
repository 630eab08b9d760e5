"""The memory plan as text: a table per role and per placement, and one JSON line per figure;
the world-model fine-tune's section the same way."""

from __future__ import annotations

import json

from wmrl.plan.finetune import FinetunePlan
from wmrl.plan.memory import GB, MemoryPlan, Role


def _gb(n: int | float) -> str:
    return f"{n / GB:8.2f}"


def role_rows(role: Role, title: str | None = None) -> list[str]:
    """A role's lines: its items (resident, then working set) and its peak, in GB."""
    out = [f"  {title or role.name}  ({role.note})"]
    out += [f"    {k:<54}{_gb(v)}   resident" for k, v in role.resident.items()]
    out += [f"    {k:<54}{_gb(v)}   working set" for k, v in role.working.items()]
    return out + [f"    {'peak':<54}{_gb(role.peak)}"]


def format_table(plan: MemoryPlan) -> str:
    h, pr, ro = plan.header, plan.params, plan.roles
    out = [
        f"wmrl memory plan (GB = 1e9 bytes, tensors only; formulas in wmrl/plan/): "
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
        out.extend(role_rows(ro[key]))

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


def json_lines(plan: MemoryPlan) -> list[str]:
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


def format_finetune_table(ft: FinetunePlan) -> str:
    """The world-model fine-tune section: parameters per mode, the bytes per rank item by item
    (AdamW states in the param dtype, the plan's assumption), the traced activations, and the
    peak per rank of each mode with checkpointing off / on and with either state dtype."""
    h, opt = ft.header, ft.options
    ckpt = h["configured_checkpointing"]
    out = [
        f"world-model fine-tune (scripts/finetune_world_model.py strategy=world_model_shard "
        f"trainer.precision=bf16-true): FSDP2 over {h['shard_group']} ranks "
        f"({h['wrap_classes'][0].rsplit('.', 1)[-1]} units, roots {', '.join(h['roots'])}), the "
        f"rest replicated; {h['clips']} clip(s) of {h['frames']} frames at "
        f"{h['height']}x{h['width']} per rank",
        f"  assumption: parameters {h['param_dtype']} (bf16-true converts the whole module), "
        f"AdamW m + v in the {h['adamw_state_dtype']}, master weights {h['master_weights']}; "
        "the last column: float32 m + v and a float32 master copy",
        f"  {'mode':<22}{'parameters':>16}{'trainable':>16}{'sharded':>16}",
    ]
    names = {"full": "full", "lora": f"LoRA rank {h['lora_rank']}"}
    for mode, p in ft.params.items():
        out.append(f"  {names[mode]:<22}{p['params']:>16,}{p['trainable']:>16,}"
                   f"{p['sharded']:>16,}")
    out.append(f"  per rank, checkpointing {'on' if ckpt else 'off'} (module.gradient_"
               f"checkpointing={str(ckpt).lower()}){'GB':>24}")
    for mode in ft.params:
        out.extend(role_rows(ft.roles[(mode, ckpt, "param dtype")], names[mode]))
    out.append("  activations traced on meta (GB): VAE encode / DiT forward (kept for backward) / "
               "backward")
    for (mode, on), a in ft.activations.items():
        out.append(f"    {names[mode]:<16} checkpointing {'on ' if on else 'off'}   "
                   f"{a['encode'] / GB:.2f} / {a['forward'] / GB:.2f} ({a['saved'] / GB:.2f}) / "
                   f"{a['backward'] / GB:.2f}")
    sizes = opt.device_sizes_gb
    out += [f"  peak per rank; fits = peak <= {opt.headroom:g} x size",
            f"    {'mode':<16}{'checkpointing':>14}{'peak GB':>9}" +
            "".join(f"{str(s) + ' GB':>8}" for s in sizes) + f"{'fp32 m+v+master':>17}"]
    for mode in ft.params:
        for on in (False, True):
            role, fits = ft.roles[(mode, on, "param dtype")], ft.fits[(mode, on, "param dtype")]
            fp32 = ft.roles[(mode, on, "fp32")]
            out.append(f"    {names[mode]:<16}{'on' if on else 'off':>14}{role.peak / GB:>9.2f}" +
                       "".join(f"{('fits' if fits[s] else '-'):>8}" for s in sizes) +
                       f"{fp32.peak / GB:>17.2f}")
    return "\n".join(out)


def finetune_json_lines(ft: FinetunePlan) -> list[str]:
    """One JSON object per figure of the fine-tune plan."""
    lines = [dict(figure="finetune_params", mode=m, **{k: v for k, v in p.items() if k != "e"})
             for m, p in ft.params.items()]
    for (mode, on), a in ft.activations.items():
        lines.append(dict(figure="finetune_activations", mode=mode, checkpointing=on,
                          clips=ft.header["clips"], **{k: int(v) for k, v in a.items()},
                          gb=round(a["working"] / GB, 3)))
    for (mode, on, states), role in ft.roles.items():
        if states == "param dtype":
            for kind, items in (("resident", role.resident), ("working", role.working)):
                lines += [dict(figure="finetune_bytes", mode=mode, checkpointing=on, item=k,
                               kind=kind, bytes=int(v), gb=round(v / GB, 3))
                          for k, v in items.items()]
        lines.append(dict(figure="finetune_peak", mode=mode, checkpointing=on,
                          adamw_states=states, bytes=int(role.peak),
                          gb=round(role.peak / GB, 3),
                          fits={str(s): f for s, f in ft.fits[(mode, on, states)].items()}))
    lines.append(dict(figure="finetune_setup", **ft.header))
    return [json.dumps(x) for x in lines]
