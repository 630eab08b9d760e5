"""The full-size check's parent: compose the config, check the disk, generate what is absent
(a release and its import, a policy checkpoint), run each part in a child process
(``wmrl.full_size_check.parts``) and print one JSON line per figure, each part's peak beside
the plan's (``wmrl.plan.memory.make_plan`` for the same config on one device)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from strategies import devices
from wmrl.build import to_container
from wmrl.config import validate
from wmrl.errors import ConfigError, one_line
from wmrl.full_size_check.options import (
    PARTS,
    ROLE,
    CheckOptions,
    check_options,
    compose,
    part_overrides,
)
from wmrl.pipeline.rlinf.synthetic import dit_release_shapes
from wmrl.pipeline.rlinf.vae import release_vae_shapes
from wmrl.plan.memory import PlanOptions, make_plan
from wmrl.plan.meta import build_policy, numel
from wmrl.policies.checkpoint import is_policy_dir
from wmrl.weights.dtypes import dtype_name
from wmrl.world_model.files import is_world_model_dir

GB = 1e9
ROOT = Path(__file__).resolve().parents[2]  # the children run here, as the parent's script
PROMPT_TOKENS = PlanOptions.prompt_tokens  # the plan's own default, until a part measures one


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def free_memory(device: str) -> int:
    """Bytes this machine can give a part now: MemAvailable, or the card's free memory."""
    if device == "cpu":
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kb * 1024
    import torch

    devices.import_vendor(torch.device(device).type)
    return int(torch.accelerator.get_memory_info(torch.device(device))[0])


def release_files(root: Path) -> dict:
    """The DiT shards, the VAE and the reset data of a release directory."""
    dit = sorted(str(p) for p in root.glob("model*.safetensors"))
    vae, dataset = root / "Wan2.2_VAE.pth", root / "dataset"
    missing = [n for n, ok in (("model-*.safetensors", dit), ("Wan2.2_VAE.pth", vae.is_file()),
                               ("dataset/", dataset.is_dir())) if not ok]
    if missing:
        raise ConfigError(f"+check.release={str(root)!r} has no {', '.join(missing)}: give "
                          "the directory of RLinf's release (model-00001.safetensors, "
                          "Wan2.2_VAE.pth, dataset/)")
    return {"dit": dit, "vae": str(vae), "dataset": str(dataset)}


def bytes_to_write(cfg, write_release: bool, write_policy: bool) -> int:
    """Disk the generated files take: the release and its import, the random policy."""
    wm = to_container(cfg.env.world_model)
    total = 0
    if write_release:
        dit = sum(math.prod(s) for s in dit_release_shapes(wm["transformer"]).values())
        vae = sum(math.prod(s) for s in release_vae_shapes(wm["vae"]).values())
        total += 2 * (2 * dit + 4 * vae)  # the release and its import
    if write_policy:
        total += 2 * numel(build_policy(to_container(cfg.policy))[0])
    return total


def run_child(part: str, spec: dict, specs: Path, timeout_s: int) -> dict:
    """One part in its own process (its own peak); its last stdout line is its result. Its
    spec is written into ``specs``, the run's own folder (``new_specs_dir``)."""
    path = specs / f"{part}.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-m", "wmrl.full_size_check.parts", part, str(path)],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{part} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planned(cfg, role: str, prompt_tokens: int) -> dict:
    """``make plan``'s figures for ``role`` of ``cfg`` on one device."""
    r = make_plan(cfg, PlanOptions(prompt_tokens=prompt_tokens)).roles[role]
    return {"plan_gb": r.peak / GB, "plan_resident_gb": r.r / GB, "plan_working_gb": r.t / GB}


def compare(part: str, peak: int, plan: dict, tolerance: float, device: str) -> dict:
    ratio = peak / GB / plan["plan_gb"]
    return {"name": f"full_size_check.{part}.peak_gb", "value": round(peak / GB, 3),
            "unit": "GB", "device": device, **{k: round(v, 3) for k, v in plan.items()},
            "ratio": round(ratio, 3), "agrees": abs(ratio - 1) <= tolerance}


def dump(cfg, specs: Path, name: str) -> str:
    path = specs / f"{name}.yaml"
    cfg = cfg.copy()
    cfg.run_dir = str(specs.parent)  # the workdir, not Hydra's run dir: no Hydra run here
    OmegaConf.save(cfg, path, resolve=True)
    return str(path)


def vae_in_float32(device: str, vae_dtype) -> bool:
    """Whether the check runs a bf16 VAE (``bf16`` or ``bfloat16``: the one dtype table) in
    float32: on a CPU, where torch's bf16 3-D convolution has no fast kernel (one 160-channel
    3x3x3 conv on 3x64x64: 97 s in bf16, 0.18 s in float32 here); the plan it is compared
    with counts it so."""
    return device == "cpu" and vae_dtype is not None and dtype_name(
        vae_dtype, "env.world_model.vae_dtype") == "bfloat16"


def run_check(user: list[str]) -> int:
    """The whole check for the command line's overrides ``user``: exit 0, 1 when a part fails
    (or the disk is short), 2 for a bad config; a refusal is one line on stderr."""
    try:
        cfg = compose(user)
        validate(cfg)
        opts = check_options(cfg)
    except (ConfigError, ValueError) as err:
        print(f"full_size_check: {one_line(err)}", file=sys.stderr)
        return 2
    kind = devices.detect_device_type()  # npu, musa, cuda, else cpu
    device = opts.device or (f"{kind}:0" if kind != "cpu" else "cpu")
    workdir = Path(opts.workdir).resolve()
    made = []  # what this run wrote, removed at the end unless +check.keep
    try:
        return _generate_and_run(cfg, user, opts, device, workdir, made)
    except (ConfigError, ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        print(f"full_size_check: {one_line(err)}", file=sys.stderr)
        return 1
    finally:
        if not opts.keep:
            remove_written(made)


def new_output(path: Path, made: list[Path]) -> Path:
    """``path``, recorded in ``made`` (removed at the end) only when this run creates it: a
    folder already there (a kept earlier run's, or the user's, which the part's writer
    refuses) is never removed by the check."""
    if not path.exists():
        made.append(path)
    return path


def new_specs_dir(workdir: Path, made: list[Path]) -> Path:
    """A fresh folder in ``workdir`` for the parts' specs and configs, recorded in ``made``:
    no name of the check's can collide with a file of the user's there."""
    workdir.mkdir(parents=True, exist_ok=True)
    specs = Path(tempfile.mkdtemp(dir=workdir, prefix="specs-"))
    made.append(specs)
    return specs


def remove_written(made: list[Path]) -> None:
    """Remove what this run wrote (``made``), and nothing else of the workdir."""
    for path in made:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _generate_and_run(cfg, user: list[str], opts: CheckOptions, device: str, workdir: Path,
                      made: list[Path]) -> int:
    wm_path, policy_path = cfg.env.world_model.path, cfg.policy.pretrained_path
    write_policy = not is_policy_dir(policy_path)
    reward_ckpt = cfg.reward.get("checkpoint") if cfg.get("reward") else None
    if opts.release and (Path(opts.release) / "resnet_rm.pth").is_file():
        reward_ckpt = str(Path(opts.release) / "resnet_rm.pth")
    random_reward = bool(reward_ckpt) and not Path(str(reward_ckpt)).exists()
    cpu_vae = vae_in_float32(device, cfg.env.world_model.get("vae_dtype"))
    release = None if is_world_model_dir(wm_path) else (
        release_files(Path(opts.release)) if opts.release else "synthetic")
    specs = new_specs_dir(workdir, made)
    need = bytes_to_write(cfg, release == "synthetic", write_policy)
    free = shutil.disk_usage(workdir).free
    if need > free:
        raise ConfigError(f"+check.workdir={str(workdir)!r} has {free / GB:.1f} GB free; "
                          f"the generated files take {need / GB:.1f} GB: point "
                          "+check.workdir at a larger disk")
    emit({"name": "full_size_check.setup", "device": device, "workdir": str(workdir),
          "world_model": str(wm_path) if release is None else "imported",
          "release": release if isinstance(release, str) else opts.release,
          "policy": "random, at the config's shapes" if write_policy else str(policy_path),
          "reward": "random, at the config's widths" if random_reward else reward_ckpt,
          "vae_dtype": "float32 (CPU)" if cpu_vae else cfg.env.world_model.get("vae_dtype"),
          **({"bf16_linears": "float32 GEMMs, bf16 rounding (CPU: "
                              "wmrl.full_size_check.cpu_linear)"} if device == "cpu" else {}),
          "disk_gb": round(need / GB, 1), "free_memory_gb": round(free_memory(device) / GB, 1)})
    paths = (["reward.checkpoint=null"] if random_reward
             else [f"reward.checkpoint={reward_ckpt}"] if reward_ckpt else [])
    if cpu_vae:
        paths.append("env.world_model.vae_dtype=float32")
    if release is not None:
        if release == "synthetic":
            out = new_output(workdir / "release", made)
            r = run_child("release", {"config": dump(cfg, specs, "base"), "out": str(out),
                                      "envs": opts.envs}, specs, opts.timeout_s)
            emit({"name": "full_size_check.release.write_s", "value": r["seconds"],
                  "unit": "s", "dit_params": r["dit_params"], "vae_params": r["vae_params"]})
            release = r
        out = new_output(workdir / "world_model", made)
        r = run_child("import", {"config": dump(cfg, specs, "base"), "out": str(out),
                                 **{k: release[k] for k in ("dit", "vae", "dataset")}},
                      specs, opts.timeout_s)
        emit({"name": "full_size_check.import.seconds", "value": r["seconds"], "unit": "s"})
        emit({"name": "full_size_check.import.peak_gb", "value": r["peak_gb"], "unit": "GB",
              "device": "cpu", "note": "make plan does not plan imports"})
        paths += [f"env.world_model.path={out}", f"env.initial_states={out}/initial_states"]
    if write_policy:
        out = new_output(workdir / "policy", made)
        r = run_child("policy_checkpoint", {"config": dump(cfg, specs, "base"),
                                            "out": str(out)}, specs, opts.timeout_s)
        emit({"name": "full_size_check.policy_checkpoint.write_s", "value": r["seconds"],
              "unit": "s", "params": r["params"]})
        paths += [f"policy.pretrained_path={out}", "policy.config=null"]
    failed = False
    free_now = free_memory(device)
    for part in [p for p in PARTS if p not in opts.parts]:
        emit({"name": f"full_size_check.{part}.skipped", "why": "not in +check.parts"})
    for part in [p for p in PARTS if p in opts.parts]:
        part_cfg = compose(user, [*paths, *part_overrides(part, opts, bool(cfg.policy.lora))])
        if part.startswith("grpo"):  # an actor part's single env needs no group
            validate(part_cfg)
        guess = planned(part_cfg, ROLE[part], PROMPT_TOKENS)
        if guess["plan_gb"] * GB > 0.9 * free_now:
            emit({"name": f"full_size_check.{part}.skipped", "plan_gb":
                  round(guess["plan_gb"], 1), "free_memory_gb": round(free_now / GB, 1),
                  "why": "the plan's peak is over 90% of this machine's free memory"})
            continue
        try:
            r = run_child(part, {"config": dump(part_cfg, specs, part), "device": device,
                                 "workdir": str(workdir)}, specs, opts.timeout_s)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            failed = True
            emit({"name": f"full_size_check.{part}.failed", "error": one_line(err)})
            continue
        for key, value in r["seconds"].items():
            emit({"name": f"full_size_check.{part}.{key}", "value": value, "unit": "s"})
        row = compare(part, r["peak_bytes"], planned(
            part_cfg, ROLE[part], r.get("prompt_tokens", PROMPT_TOKENS)), opts.tolerance, device)
        emit({**row, **r.get("extra", {})})
        if not row["agrees"]:
            print(f"full_size_check: {part}: measured {row['value']} GB, planned "
                  f"{row['plan_gb']} GB ({row['ratio']}x): the plan is off by more than "
                  f"{opts.tolerance:.0%}", file=sys.stderr)
    return 1 if failed else 0
