"""Where each rollout actor runs and which device it computes on.

Roles ask Ray for resources (``rollout.env_resources``, ``rollout.policy_resources``: e.g.
``{GPU: 1}``, ``{GPU: 0.5}``, ``{NPU: 1}``, a custom ``{render: 1}``), and an actor derives
its device from the accelerator ids Ray assigned it, as an index into the cards this process
sees. Nothing here writes a ``*_VISIBLE_DEVICES`` variable: Ray narrows it when it starts the
actor (then the assigned id is a physical card and its index in the list is the local index),
or it is left as the launcher set it.

Collocated actors share their trainer rank's card: they request no accelerator, are pinned
to the trainer's node (node affinity) and receive the card explicitly, as the machine's id
(``cuda:<card>``), which each side maps through its own visible list.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from strategies import devices
from wmrl.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "npu", "musa", "xpu")
# The Ray resource that hands out cards of each device type. Ray narrows the runtime's
# visible list to the cards it assigned for CUDA/ROCm, Ascend and Intel (ids are physical
# cards); it has no Moore Threads manager, so MUSA cards are requested as GPU and its ids are
# indices into the cards the process sees.
RAY_RESOURCE = {"cuda": "GPU", "xpu": "GPU", "musa": "GPU", "npu": "NPU"}
_IDS_ARE_CARDS = {"cuda", "npu", "xpu"}
_ACCELERATOR_KEYS = frozenset(RAY_RESOURCE.values())
# Ray's documented switches that keep it from narrowing the visible list in an actor that
# requests no card (a collocated actor must still see its trainer's card).
_NOSET = {"cuda": ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
                   "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
                   "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES"),
          "npu": ("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",),
          "xpu": ("RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR",)}


def shared_card(device: torch.device | str) -> str:
    """The trainer's device as the machine names it: ``cuda:1`` with
    ``CUDA_VISIBLE_DEVICES=2,3`` -> ``cuda:3``."""
    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    index = device.index if device.index is not None else 0
    return f"{device.type}:{devices.physical_id(device.type, index)}"


def resolve_device(requested: str, accelerator_ids: Mapping[str, list], shared: str | None = None,
                   role: str = "rollout") -> str:
    """The device string an actor computes on.

    ``shared`` (collocated): the trainer's card as :func:`shared_card` names it. Otherwise the
    first accelerator id Ray assigned for ``requested``'s resource; ``auto`` picks the device
    type from the ids Ray assigned (none -> ``cpu``)."""
    if requested not in DEVICES:
        raise ConfigError(f"rollout.device={requested!r}: choose one of {DEVICES}")
    if requested == "cpu":
        return "cpu"
    if shared is not None:
        kind, _, card = shared.partition(":")
        if kind == "cpu":
            return "cpu"
        if requested not in ("auto", kind):
            raise ConfigError(f"rollout.device={requested} but the trainer (whose device "
                              f"collocated actors share) is on {kind}")
        return f"{kind}:{devices.local_index(kind, card)}"
    kind = requested
    if kind == "auto":
        if accelerator_ids.get("NPU"):
            kind = "npu"
        elif accelerator_ids.get("GPU"):
            found = devices.detect_device_type()
            kind = found if RAY_RESOURCE.get(found) == "GPU" else "cuda"
        else:
            return "cpu"
    ids = accelerator_ids.get(RAY_RESOURCE[kind]) or []
    if not ids:
        raise ConfigError(
            f"rollout.device={requested} but Ray assigned the {role} actor no "
            f"{RAY_RESOURCE[kind]}: request one in rollout.{role}_resources "
            f"(e.g. {{{RAY_RESOURCE[kind]}: 1}}) or use rollout.placement=collocated")
    card = str(ids[0])
    index = devices.local_index(kind, card) if kind in _IDS_ARE_CARDS else int(card)
    return f"{kind}:{index}"


def actor_options(resources: Mapping[str, float] | None, cpus: float,
                  node_id: str | None = None, shared_type: str = "cpu") -> dict:
    """Ray ``.options()`` for one actor: CPUs, cards, custom resources; ``node_id`` pins it to
    a node (collocated: its trainer's); ``shared_type`` keeps that device type's cards visible
    in an actor that requests none."""
    res = {k: float(v) for k, v in (resources or {}).items()}
    opts: dict = {"num_cpus": res.pop("CPU", cpus), "num_gpus": res.pop("GPU", 0.0)}
    if res:
        opts["resources"] = res
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    if shared_type in _NOSET:
        opts["runtime_env"] = {"env_vars": {k: "1" for k in _NOSET[shared_type]}}
    return opts


def check_roles(device: str, placement: str, roles: Mapping[str, Mapping[str, float]]) -> None:
    """Config checks before Ray starts: collocated actors request no card (they share the
    trainer's), and an explicit accelerator device needs its card in the role's request."""
    for role, res in roles.items():
        cards = sorted(set(res or {}) & _ACCELERATOR_KEYS)
        if placement == "collocated" and cards:
            raise ConfigError(
                f"rollout.{role}_resources requests {cards} but rollout.placement=collocated "
                "shares the trainer's device: remove them (or use disaggregated/hybrid)")
        if placement != "collocated" and device in RAY_RESOURCE and \
                RAY_RESOURCE[device] not in (res or {}):
            raise ConfigError(
                f"rollout.device={device} but rollout.{role}_resources={dict(res or {})} "
                f"requests no {RAY_RESOURCE[device]}: add e.g. {{{RAY_RESOURCE[device]}: 1}}")


def check_cluster(needs: Mapping[str, Mapping[str, float]], cluster: Mapping[str, float],
                  ranks: int = 1) -> None:
    """Fail fast when the Ray cluster lacks a requested resource. ``needs``: config key ->
    resource totals of that key's actors for one trainer rank (every rank asks the same)."""
    total: dict[str, float] = {}
    for res in needs.values():
        for k, v in res.items():
            total[k] = total.get(k, 0.0) + v * ranks
    for k, want in total.items():
        have = float(cluster.get(k, 0.0))
        if want > have + 1e-9:
            keys = [f"{key} ({res[k]:g} for this rank)" for key, res in needs.items()
                    if res.get(k)]
            how = {"CPU": "--num-cpus=N", "GPU": "--num-gpus=N"}.get(
                k, f"--resources='{{\"{k}\": N}}'")
            raise ConfigError(
                f"{', '.join(keys)}: the rollout actors of {ranks} trainer rank(s) need "
                f"{k}: {want:g} but the Ray cluster has {k}: {have:g}. Lower the request or "
                f"start Ray with the resource (ray start {how}, then rollout.ray_address=auto)")


def request_of(options: Mapping, count: int) -> dict[str, float]:
    """Resource totals of ``count`` actors started with Ray ``options``."""
    out = {"CPU": options.get("num_cpus", 0.0) * count,
           "GPU": options.get("num_gpus", 0.0) * count}
    for k, v in (options.get("resources") or {}).items():
        out[k] = out.get(k, 0.0) + v * count
    return {k: v for k, v in out.items() if v}
