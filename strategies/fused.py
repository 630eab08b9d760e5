"""Swap a model's hot ops for the device's fused kernels: RMSNorm and rotary position embedding.

``apply_fused_ops(model, device_type)`` takes one of two paths per module and says which in its
report:

- **hooks** (the supported path): transformers 5 marks its layers for exactly this swap —
  ``@use_kernel_forward_from_hub("RMSNorm")`` on ``LlamaRMSNorm`` and its kin, and
  ``@use_kernelized_func(apply_rotary_pos_emb)`` on the attention classes, whose
  ``apply_rotary_pos_emb`` is ``@use_kernel_forward_from_hub("rotary_pos_emb")``. The HF
  ``kernels`` library serves those hooks: ``kernelize(module, device=..., mode=...)`` gives each
  marked module the forward of a layer found in a kernel mapping. We register two in-process
  layers (``FusedRMSNorm``, ``FusedRotary``; no hub, nothing downloaded) in a mapping scoped with
  ``use_kernel_mapping(..., inherit_mapping=False)`` and kernelize each accepted module of the
  given model: the classes, ``modeling_llama.apply_rotary_pos_emb`` and every other model stay
  eager (transformers gives each attention instance its own rotary wrapper).
- **probe** (the fallback for modules without hooks: ``torch.nn.RMSNorm`` in diffusers' Wan,
  a custom model, transformers without ``kernels``, or a device type ``kernels`` does not know,
  e.g. MUSA): an RMSNorm-like module (class name ending in ``RMSNorm``, a 1-D ``weight``,
  ``variance_epsilon`` or ``eps``, no bias) gets the same ``FusedRMSNorm`` forward on the
  instance; a module whose *undecorated* class ``forward`` calls a module-level
  ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` gets an instance forward: a copy of
  that function whose globals map the name to the fused version (``fused_probe.py``). A
  decorated forward without hooks is refused (re-creating a decorator's closure is what broke on
  transformers 5.25).

Both paths probe first, on random fp32 data and a random weight, that the eager op computes the
standard formula (``weight * x / rms(x)``; ``q * cos + rotate_half(q) * sin``): Gemma's
``(1 + weight)``, an interleaved or partial rotary, a bias are refused and reported. At call
time the kernel runs only for tensors on ``device_type`` with matching dtypes (else eager: a
model fused for ``npu`` still runs on CPU), and for a full-width rotary. When a model carries
hooks for an op that has a kernel and nothing was replaced, the report says so in ``warnings``
(and ``warnings.warn``) instead of staying silent.

Kernels per device: ``rms_norm`` is ``torch_npu.npu_rms_norm`` on Ascend and
``torch.nn.functional.rms_norm`` elsewhere; ``rotary`` is ``torch_npu.npu_rotary_mul`` on Ascend
and eager elsewhere (``kernels={"rotary": fn}`` for your own, e.g.
``torch.compile(rotary_reference)``). Parameters, state-dict keys, module classes and FSDP
wrapping are untouched; the fused forwards survive ``copy.deepcopy`` and pickling;
``remove_fused_ops(model)`` restores eager.

Files: this module holds the entry points, the report, the fused layers and the hooks path;
``fused_kernels.py`` the kernels per device, the call-time dispatch both paths share and the
probes of the eager math; ``fused_probe.py`` the probe path's function rebinding for rotary.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from strategies import devices
from strategies.fused_kernels import (
    DEFAULT_KERNELS,
    FUSED_ATTR,
    KERNELS,
    FusedChoice,
    Refused,
    kernel_name,
    kernels_for,
    npu_rms_norm,
    npu_rotary_mul,
    probe_rms_norm,
    probe_rotary,
    rms_norm_eps_attr,
    rotary_call,
    rotary_reference,
    rotate_half,
    torch_rms_norm,
)
from strategies.fused_probe import RotaryForward, fuse_custom_rotary, rotary_name

# the kernels and fused-choice names live in fused_kernels.py; they are part of this API too
__all__ = [
    "DEFAULT_KERNELS", "FUSED_ATTR", "HOOK_NAMES", "KERNELS", "KERNELS_DEVICE_TYPES", "LAYERS",
    "OPS", "ROTARY_NAMES", "FusedChoice", "FusedOpsReport", "FusedRMSNorm", "FusedRotary",
    "InProcessLayer", "apply_fused_ops", "fused_ops_config", "kernel_name", "kernels_device_type",
    "kernels_for", "npu_rms_norm", "npu_rotary_mul", "remove_fused_ops", "resolve_device_type",
    "rotary_reference", "rotate_half", "torch_rms_norm",
]

OPS = ("rms_norm", "rotary")
ROTARY_NAMES = ("apply_rotary_pos_emb",)
# the layer names transformers' hooks register per op (``kernel_layer_name``)
HOOK_NAMES = {"rms_norm": ("RMSNorm",), "rotary": ("rotary_pos_emb",)}
# device types the kernels library knows (kernels.kernelize validates against these)
KERNELS_DEVICE_TYPES = ("cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu")


def resolve_device_type(device_type: str | torch.device | None = "auto") -> str:
    """``"auto"``/None: the first device family with devices (npu, musa, cuda), else cpu."""
    if device_type is None or device_type == "auto":
        return devices.detect_device_type()
    if isinstance(device_type, torch.device):
        return device_type.type
    return str(device_type).split(":")[0]  # "npu:0" parses before torch_npu registers npu


def kernels_device_type(device_type: str) -> str | None:
    """``device_type`` as the kernels library names it (ROCm builds report ``cuda`` in torch,
    ``rocm`` in kernels), or None where kernels does not know it (e.g. ``musa``)."""
    if device_type == "cuda" and getattr(torch.version, "hip", None):
        return "rocm"
    return device_type if device_type in KERNELS_DEVICE_TYPES else None


# ---- report ------------------------------------------------------------------------------
@dataclass
class FusedOpsReport:
    """What ``apply_fused_ops`` replaced: per op the module names, per replaced module the path
    (``"hooks"``: transformers' kernel hooks via ``kernels.kernelize``; ``"probe"``: an instance
    forward set here), per skipped candidate why, and warnings (hooks present, nothing fused)."""

    device_type: str
    kernels: dict[str, str | None]  # op -> kernel name (None: eager kept, no kernel)
    replaced: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # "op:module name" -> reason
    path: dict[str, str] = field(default_factory=dict)  # "op:module name" -> hooks | probe
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, op: str, path: str | None = None) -> int:
        names = self.replaced.get(op, [])
        if path is None:
            return len(names)
        return sum(self.path.get(f"{op}:{n}") == path for n in names)

    def as_dict(self) -> dict:
        return {"device_type": self.device_type, "kernels": dict(self.kernels),
                "replaced": {k: len(v) for k, v in self.replaced.items()},
                "via_hooks": {k: self.count(k, "hooks") for k in self.replaced},
                "skipped": dict(self.skipped), "warnings": list(self.warnings),
                "notes": list(self.notes)}

    def summary(self) -> str:
        parts = []
        for op, kern in self.kernels.items():
            if not kern:
                parts.append(f"{op}: eager kept (no fused kernel for {self.device_type})")
                continue
            n, hooks = self.count(op), self.count(op, "hooks")
            via = [f"{hooks} via kernel hooks"] * bool(hooks) + \
                [f"{n - hooks} via probe"] * bool(n - hooks)
            parts.append(f"{op}: {n} modules -> {kern}" + (f" ({', '.join(via)})" if via else ""))
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        parts += [f"WARNING {w}" for w in self.warnings]
        return f"fused ops on {self.device_type}: " + "; ".join(parts)

    __str__ = summary


# ---- the fused layers (stateless, as kernels requires; picklable by reference) -------------
class FusedRMSNorm(nn.Module):
    """The fused RMSNorm forward (bound to an RMSNorm module by kernelize or the probe path)."""

    def forward(self, hidden_states):
        choice = self.__dict__.get(FUSED_ATTR)
        w = self.weight
        if (choice is None or hidden_states.device.type != choice.device_type
                or hidden_states.dtype != w.dtype):
            return type(self).forward(self, hidden_states)  # eager keeps its dtype promotion
        eps = getattr(self, choice.eps_attr)
        if eps is None:  # torch.nn.RMSNorm(eps=None)
            eps = torch.finfo(hidden_states.dtype).eps
        return choice.kernel(hidden_states, w, float(eps))


class FusedRotary(nn.Module):
    """The fused ``apply_rotary_pos_emb`` (bound to transformers' per-instance rotary wrapper)."""

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        eager = functools.partial(type(self).forward, self)  # the wrapped eager function
        choice = self.__dict__.get(FUSED_ATTR)
        if choice is None:
            return eager(q, k, cos, sin, unsqueeze_dim)
        return rotary_call(choice, eager, q, k, cos, sin, unsqueeze_dim)


LAYERS = {"rms_norm": FusedRMSNorm, "rotary": FusedRotary}


class InProcessLayer:
    """A kernels repository (``load() -> layer class``) holding a layer defined in this process:
    nothing is fetched from the hub or read from disk."""

    def __init__(self, layer: type[nn.Module]):
        self.layer, self.layer_name = layer, layer.__name__

    def load(self) -> type[nn.Module]:
        return self.layer

    def __eq__(self, other):
        return isinstance(other, InProcessLayer) and other.layer is self.layer

    def __hash__(self):
        return hash(self.layer)

    def __str__(self):
        return f"in-process layer {self.layer.__module__}.{self.layer.__qualname__}"


def _kernels_lib():
    try:
        import kernels
    except ImportError:
        return None
    return kernels


# ---- the hooks path ------------------------------------------------------------------------
def _hook_name(module: nn.Module, op: str) -> str | None:
    name = getattr(type(module), "kernel_layer_name", None)
    return name if name in HOOK_NAMES[op] else None


def _hooked_rotaries(module: nn.Module) -> dict[str, nn.Module]:
    """The per-instance rotary wrappers ``@use_kernelized_func`` attaches to ``module`` (a plain
    attribute, as kernels documents; ``kernels.kernelize`` reads the same)."""
    funcs = module.__dict__.get("_kernel_funcs") or {}
    return {name: f for name, f in funcs.items() if _hook_name(f, "rotary")}


@contextlib.contextmanager
def _quiet_kernels():
    """kernels logs a warning per module it reverts; one summary line in our report is enough."""
    log = logging.getLogger("kernels")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _kernelize(lib, module: nn.Module, op: str, layer_name: str, kdev: str) -> None:
    """kernels.kernelize on this one module, under a mapping of our in-process layer only."""
    mapping = {layer_name: {kdev: InProcessLayer(LAYERS[op])}}
    mode = lib.Mode.TRAINING if module.training else lib.Mode.INFERENCE
    with lib.use_kernel_mapping(mapping, inherit_mapping=False):
        lib.kernelize(module, mode=mode, device=kdev, use_fallback=False)


def _kernelized(lib, module: nn.Module) -> bool:
    """Whether kernels reports ``module`` as running a kernel (its public inspection API)."""
    return "" in lib.get_kernelized_layers(module).layers


# ---- entry points ------------------------------------------------------------------------
def _is_fused(module: nn.Module) -> bool:
    """Whether ``module`` runs a fused forward set by ``apply_fused_ops`` (either path)."""
    fwd = module.__dict__.get("forward")
    return isinstance(fwd, RotaryForward) or getattr(fwd, "__func__", None) in (
        FusedRMSNorm.forward, FusedRotary.forward) or getattr(fwd, "func", None) is \
        FusedRMSNorm.forward


def _kernelize_checked(lib, module: nn.Module, choice: FusedChoice, layer_name: str,
                       kdev: str) -> None:
    """kernels.kernelize ``module`` to run ``choice``, verified with kernels' own inspection;
    raises Refused (and leaves the module eager) when kernels refuses or replaces nothing."""
    module.__dict__[FUSED_ATTR] = choice
    try:
        _kernelize(lib, module, choice.op, layer_name, kdev)
        if not _kernelized(lib, module):
            raise Refused("kernels.kernelize left the eager forward in place")
    except Exception as err:  # noqa: BLE001 - e.g. kernels' signature check refused our layer
        del module.__dict__[FUSED_ATTR]
        if isinstance(err, Refused):
            raise
        raise Refused(f"kernels.kernelize refused it ({type(err).__name__}: {err})") from None


def _fuse_norm(lib, module: nn.Module, kernel: Callable, dev: str, kdev: str | None) -> str:
    """Probe one RMSNorm-like module and fuse it; returns the path taken (or raises Refused)."""
    eps_attr = rms_norm_eps_attr(module)
    probe_rms_norm(module, eps_attr)
    choice = FusedChoice("rms_norm", kernel, dev, eps_attr)
    hook = _hook_name(module, "rms_norm") if lib is not None else None
    if hook and kdev:
        _kernelize_checked(lib, module, choice, hook, kdev)
    module.__dict__[FUSED_ATTR] = choice
    # kernels binds the layer's forward as a bound method, which pickles by attribute name and
    # so comes back as the class's eager forward; the same binding as a partial pickles by
    # reference (kernels' revert drops it all the same)
    module.forward = functools.partial(FusedRMSNorm.forward, module)
    return "hooks" if hook and kdev else "probe"


def _fuse_hooked_rotary(lib, func: nn.Module, kernel: Callable, dev: str, kdev: str | None,
                        probe: Callable) -> str:
    """Fuse transformers' per-instance rotary wrapper ``func`` through kernels.kernelize, after
    ``probe`` of its eager function; raises Refused."""
    if not kdev:
        raise Refused(f"kernels has no device type {dev!r}")
    probe(types.MethodType(type(func).forward, func))  # the eager apply_rotary_pos_emb
    _kernelize_checked(lib, func, FusedChoice("rotary", kernel, dev), _hook_name(func, "rotary"),
                       kdev)
    return "hooks"



def apply_fused_ops(model: nn.Module, device_type: str | torch.device | None = "auto",
                    ops: Iterable[str] = OPS, kernels: Mapping[str, Callable | None] | None = None,
                    rotary_names: Iterable[str] = ROTARY_NAMES) -> FusedOpsReport:
    """Swap ``model``'s RMSNorm / rotary ops for ``device_type``'s fused kernels in place.

    ``device_type``: ``"auto"`` (npu, musa, cuda with devices, else cpu), or a device type; the
    kernels run only for tensors on it. ``ops``: a subset of ``OPS``. ``kernels``: op -> kernel
    overriding the device's defaults (None keeps that op eager). Apply after the weights are
    loaded (the probes read the module's device) and before wrapping in FSDP or compiling.
    Returns a ``FusedOpsReport``; modules already swapped are left as they are."""
    dev = resolve_device_type(device_type)
    ops = tuple(ops)
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"unknown fused ops {unknown}; choose from {OPS}")
    table = kernels_for(dev)
    table.update(kernels or {})
    if any(table.get(op) in (npu_rms_norm, npu_rotary_mul) for op in ops):
        devices.import_vendor("npu")  # fail here, not in the first forward, without torch_npu
    report = FusedOpsReport(dev, {op: kernel_name(table.get(op)) for op in ops},
                            {op: [] for op in ops})
    norm_kernel = table.get("rms_norm") if "rms_norm" in ops else None
    rotary_kernel = table.get("rotary") if "rotary" in ops else None
    lib = _kernels_lib()
    kdev = kernels_device_type(dev)
    if lib is not None and kdev is None:
        report.notes.append(f"the kernels library has no device type {dev!r}: hooked modules "
                            "take the probe path")
    names = tuple(rotary_names)
    hooked = {op: 0 for op in ops}  # modules carrying transformers' hooks, per op
    probed: dict = {}  # eager rotary -> None (the standard formula) or the refusal reason

    def probe_rotary_once(fn: Callable) -> None:
        key = getattr(fn, "__func__", fn)  # one probe per function, not per bound wrapper
        if key not in probed:
            try:
                probe_rotary(fn)
                probed[key] = None
            except Refused as why:
                probed[key] = str(why)
        if probed[key] is not None:
            raise Refused(probed[key])

    def attempt(op: str, mod_name: str, fuse: Callable[..., str], *args) -> None:
        key = f"{op}:{mod_name}"
        try:
            report.path[key] = fuse(*args)
        except Refused as why:
            report.skipped[key] = str(why)
            return
        report.replaced[op].append(mod_name)

    with _quiet_kernels():
        for mod_name, module in model.named_modules():
            if _is_fused(module):
                continue
            hooked_rotaries = _hooked_rotaries(module) if lib is not None else {}
            for func in hooked_rotaries.values() if rotary_kernel else ():
                hooked["rotary"] += 1
                if not _is_fused(func):
                    attempt("rotary", mod_name, _fuse_hooked_rotary, lib, func, rotary_kernel,
                            dev, kdev, probe_rotary_once)
            hook = _hook_name(module, "rms_norm") if lib is not None else None
            if norm_kernel and (hook or type(module).__name__.endswith("RMSNorm")):
                hooked["rms_norm"] += bool(hook)
                op, fuse, args = "rms_norm", _fuse_norm, (lib, module, norm_kernel, dev, kdev)
            elif rotary_kernel and not hooked_rotaries and (
                    rotary := rotary_name(type(module).forward, names)):
                op, fuse = "rotary", fuse_custom_rotary
                args = (module, rotary, rotary_kernel, dev, probe_rotary_once)
            else:
                continue
            if "forward" in module.__dict__:  # someone else's instance forward (hooks, adapters)
                report.skipped[f"{op}:{mod_name}"] = "forward already overridden on the instance"
                continue
            attempt(op, mod_name, fuse, *args)
    for op, n in hooked.items():
        if n and not report.count(op) and report.kernels.get(op):
            msg = (f"{op}: {n} modules carry transformers' kernel hooks but none was fused "
                   f"(see skipped)")
            report.warnings.append(msg)
            warnings.warn(f"apply_fused_ops: {msg}", RuntimeWarning, stacklevel=2)
    return report


def remove_fused_ops(model: nn.Module) -> int:
    """Restore the eager forwards ``apply_fused_ops`` replaced; returns how many."""
    lib = _kernels_lib()
    n = 0
    with _quiet_kernels():
        for module in model.modules():
            targets = [module, *(_hooked_rotaries(module).values() if lib else ())]
            for m in targets:
                if not _is_fused(m):
                    continue
                choice = m.__dict__.pop(FUSED_ATTR, None)
                if lib is not None and _kernelized(lib, m):
                    # kernels' own revert: kernelize with no mapping keeps the class forward
                    with lib.use_kernel_mapping({}, inherit_mapping=False):
                        lib.kernelize(m, mode=lib.Mode.INFERENCE,
                                      device=kernels_device_type(choice.device_type) if choice
                                      else "cpu", use_fallback=True)
                else:
                    m.__dict__.pop("forward", None)
                n += 1
    return n


def fused_ops_config(value) -> str | None:
    """A config flag -> a device type for ``apply_fused_ops`` or None (off): false/None/"off"
    -> None; true/"auto" -> "auto"; "npu", "cuda", "cpu", ... as given."""
    if value is None or value is False:
        return None
    if value is True:
        return "auto"
    text = str(value).strip().lower()
    if text in ("", "false", "off", "no", "0", "none"):
        return None
    if text in ("true", "on", "yes", "1", "auto"):
        return "auto"
    return resolve_device_type(text)
