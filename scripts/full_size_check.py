"""Pre-flight at full size on your own machine (a CPU or one card) before renting GPUs:
``make full-size-check``.

    python scripts/full_size_check.py                        # WoVR at the published sizes
    python scripts/full_size_check.py policy.pretrained_path=/data/openvla-oft-libero \
        env.world_model.path=/data/wovr_imported              # your checkpoints
    python scripts/full_size_check.py +check.release=/data/RLinf-Wan-LIBERO-Spatial
    python scripts/full_size_check.py +check.parts=[world_model,rollout] +check.envs=2

Composes what ``make plan`` plans (``conf/fit.yaml``, ``experiment=wovr_libero_spatial
env=wovr_libero`` unless you name others, then ``conf/experiment/real_size.yaml``, then your
overrides) and runs each part of a fit once, alone, in a child process:

``release``   (no world model at ``env.world_model.path`` and no ``+check.release``) a release
              in RLinf's layout with random weights at the config's shapes
              (``wmrl.pipeline.rlinf.synthetic``);
``import``    that release (or yours) through ``scripts/import_rlinf.py``'s own ``run``;
``policy_checkpoint`` (no checkpoint at ``policy.pretrained_path``) random weights at the
              published 7B's shapes, bf16, in the published layout;
``world_model`` an env actor (``RolloutActor``: the world model + the reward) resets
              ``+check.envs`` envs and steps one chunk;
``rollout``   a policy actor (``rollout.policy_dtype``) samples one chunk for them;
``grpo_lora`` one GRPO update (2 micro-batches of ``+check.micro_batch`` samples, one AdamW
              step) through ``GRPOModule`` and a Lightning Trainer, ``policy/lora=rlinf`` on a
              bf16 base;
``grpo_full`` the same with every parameter trained, as the config says (the documented
              real-size setting: float32 master weights, bf16-mixed).

On a CPU the parts' bf16 linear layers run through float32 GEMMs with bf16 rounding
(``wmrl.cpu_linear``): torch computes a bf16 matrix product there in its reference GEMM, and one
7B GRPO micro-batch did not finish its backward in 30 minutes on 2 cores. The VAE runs in
float32 there: bf16 3-D convolutions have no fast CPU kernel either.

Prints one JSON line per figure: seconds, and each role's peak memory beside ``make plan``'s
prediction for the same setting (the same config, one device, the measured prompt length):
the allocator's peak on a card, the resident set over the interpreter's on a CPU
(``wmrl.peak_memory``). ``agrees`` is false where they differ by more than ``+check.tolerance``
(15%). A part whose planned peak exceeds this machine's free memory is skipped with the plan's
figure. Exit 1 when a part fails. Generated files go to ``+check.workdir`` (disk space is
checked first) and are removed at the end unless ``+check.keep=true``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from strategies import devices  # noqa: E402
from wmrl.build import to_container  # noqa: E402
from wmrl.config import ConfigError, compose_config, validate  # noqa: E402
from wmrl.errors import one_line  # noqa: E402
from wmrl.plan.compose import REAL_SIZE  # noqa: E402
from wmrl.plan.memory import PlanOptions  # noqa: E402
from wmrl.plan.meta import has_world_model  # noqa: E402

GB = 1e9
DEFAULTS = ("experiment=wovr_libero_spatial", "env=wovr_libero")
PARTS = ("world_model", "rollout", "grpo_lora", "grpo_full")


@dataclass
class CheckOptions:
    """``+check.<name>=...`` on the command line."""
    parts: tuple[str, ...] = PARTS
    envs: int = 1                # envs one chunk step and one policy forward take
    micro_batch: int = 1         # samples per GRPO micro-batch
    workdir: str = "outputs/full_size_check"
    keep: bool = False           # keep the generated release, world model and policy
    release: str | None = None   # a directory holding RLinf's release files
    device: str | None = None    # default: the first card of this process's family, else cpu
    tolerance: float = 0.15
    timeout_s: int = 3600        # per part


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


# ---- the parent ------------------------------------------------------------------------------
def compose(user: list[str], part: list[str] = ()):
    given = {a.split("=", 1)[0].lstrip("+~") for a in user}
    defaults = [d for d in DEFAULTS if d.split("=", 1)[0] not in given]
    return compose_config("fit", [REAL_SIZE, *defaults, *user, *part])


def options_from(cfg) -> CheckOptions:
    extra = to_container(cfg.get("check") or {})
    unknown = set(extra) - set(CheckOptions.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"+check.{sorted(unknown)[0]}: unknown; the options are "
                          f"{sorted(CheckOptions.__dataclass_fields__)}")
    opts = CheckOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()})
    bad = set(opts.parts) - set(PARTS)
    if bad:
        raise ConfigError(f"+check.parts: {sorted(bad)} unknown; choose from {list(PARTS)}")
    if opts.envs < 1 or opts.micro_batch < 1:
        raise ConfigError("+check.envs and +check.micro_batch must be >= 1")
    return opts


def free_memory(device: str) -> int:
    """Bytes this machine can give a part now: MemAvailable, or the card's free memory."""
    if device == "cpu":
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
        return kb * 1024
    import torch

    devices.import_vendor(torch.device(device).type)
    return int(torch.accelerator.get_memory_info(torch.device(device))[0])


def has_policy(path) -> bool:
    return bool(path) and (Path(str(path)) / "config.json").is_file()


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
    from wmrl.pipeline.rlinf.synthetic import dit_release_shapes
    from wmrl.pipeline.rlinf.vae import release_vae_shapes
    from wmrl.plan.meta import build_policy, numel

    wm = to_container(cfg.env.world_model)
    total = 0
    if write_release:
        dit = sum(math.prod(s) for s in dit_release_shapes(wm["transformer"]).values())
        vae = sum(math.prod(s) for s in release_vae_shapes(wm["vae"]).values())
        total += 2 * (2 * dit + 4 * vae)  # the release and its import
    if write_policy:
        total += 2 * numel(build_policy(to_container(cfg.policy))[0])
    return total


def run_child(part: str, spec: dict, workdir: Path, timeout_s: int) -> dict:
    """One part in its own process (its own peak); its last stdout line is its result."""
    path = workdir / f"{part}.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, __file__, "--part", part, str(path)],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{part} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planned(cfg, role: str, prompt_tokens: int) -> dict:
    """``make plan``'s figures for ``role`` of ``cfg`` on one device."""
    from wmrl.plan.memory import make_plan

    plan = make_plan(cfg, PlanOptions(prompt_tokens=prompt_tokens))
    r = plan.roles[role]
    return {"plan_gb": r.peak / GB, "plan_resident_gb": r.r / GB, "plan_working_gb": r.t / GB}


def compare(part: str, peak: int, plan: dict, tolerance: float, device: str) -> dict:
    ratio = peak / GB / plan["plan_gb"]
    return {"name": f"full_size_check.{part}.peak_gb", "value": round(peak / GB, 3),
            "unit": "GB", "device": device, **{k: round(v, 3) for k, v in plan.items()},
            "ratio": round(ratio, 3), "agrees": abs(ratio - 1) <= tolerance}


def part_overrides(part: str, opts: CheckOptions, lora: bool) -> list[str]:
    """What a part changes in the user's config: one device, its envs or its batch."""
    one = ["trainer.devices=1", "rollout.num_env_workers=1", "rollout.num_rollout_workers=1",
           "rollout.pipeline_stages=1"]
    if part in ("world_model", "rollout"):
        return [*one, f"rollout.num_envs={opts.envs}", f"rollout.group_size={opts.envs}"]
    b = opts.micro_batch
    update = [*one, f"rollout.num_envs={2 * b}", "rollout.group_size=2",
              f"algorithm.micro_batch={b}", f"algorithm.global_batch={2 * b}",
              "algorithm.gradient_accumulation=true", "algorithm.update_epochs=1",
              "algorithm.filter_groups=false", "algorithm.return_filter=null",
              "trainer.max_steps=1"]
    if part == "grpo_lora":
        return [*update, *([] if lora else ["policy/lora=rlinf"]), "policy.dtype=bfloat16"]
    return [*update, "policy.lora=null"]


PROMPT_TOKENS = PlanOptions.prompt_tokens  # the plan's own default, until a part measures one
ROLE = {"world_model": "env", "rollout": "rollout", "grpo_lora": "trainer",
        "grpo_full": "trainer"}


def main(user: list[str]) -> int:
    try:
        cfg = compose(user)
        validate(cfg)
        opts = options_from(cfg)
    except (ConfigError, ValueError) as err:
        print(f"full_size_check: {one_line(err)}", file=sys.stderr)
        return 2
    kind = devices.detect_device_type()  # npu, musa, cuda, else cpu
    device = opts.device or (f"{kind}:0" if kind != "cpu" else "cpu")
    workdir = Path(opts.workdir).resolve()
    wm_path, policy_path = cfg.env.world_model.path, cfg.policy.pretrained_path
    write_policy = not has_policy(policy_path)
    reward_ckpt = cfg.reward.get("checkpoint") if cfg.get("reward") else None
    if opts.release and (Path(opts.release) / "resnet_rm.pth").is_file():
        reward_ckpt = str(Path(opts.release) / "resnet_rm.pth")
    random_reward = bool(reward_ckpt) and not Path(str(reward_ckpt)).exists()
    # torch's bf16 3-D convolution has no fast CPU kernel (one 160-channel 3x3x3 conv on
    # 3x64x64: 97 s in bf16, 0.18 s in float32 here): on a CPU the VAE runs in float32, and
    # the plan it is compared with counts it so
    cpu_vae = device == "cpu" and str(cfg.env.world_model.get("vae_dtype")) == "bfloat16"
    made = []  # what this run wrote, removed at the end unless +check.keep
    failed = False
    try:
        release = None if has_world_model(wm_path) else (
            release_files(Path(opts.release)) if opts.release else "synthetic")
        workdir.mkdir(parents=True, exist_ok=True)
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
              **({"bf16_linears": "float32 GEMMs, bf16 rounding (CPU: wmrl.cpu_linear)"}
                 if device == "cpu" else {}),
              "disk_gb": round(need / GB, 1), "free_memory_gb": round(free_memory(device) / GB, 1)})
        paths = (["reward.checkpoint=null"] if random_reward
                 else [f"reward.checkpoint={reward_ckpt}"] if reward_ckpt else [])
        if cpu_vae:
            paths.append("env.world_model.vae_dtype=float32")
        if release is not None:
            if release == "synthetic":
                out = workdir / "release"
                made.append(out)
                r = run_child("release", {"config": dump(cfg, workdir, "base"), "out": str(out),
                                          "envs": opts.envs}, workdir, opts.timeout_s)
                emit({"name": "full_size_check.release.write_s", "value": r["seconds"],
                      "unit": "s", "dit_params": r["dit_params"], "vae_params": r["vae_params"]})
                release = r
            out = workdir / "world_model"
            made.append(out)
            r = run_child("import", {"config": dump(cfg, workdir, "base"), "out": str(out),
                                     **{k: release[k] for k in ("dit", "vae", "dataset")}},
                          workdir, opts.timeout_s)
            emit({"name": "full_size_check.import.seconds", "value": r["seconds"], "unit": "s"})
            emit({"name": "full_size_check.import.peak_gb", "value": r["peak_gb"], "unit": "GB",
                  "device": "cpu", "note": "make plan does not plan imports"})
            paths += [f"env.world_model.path={out}", f"env.initial_states={out}/initial_states"]
        if write_policy:
            out = workdir / "policy"
            made.append(out)
            r = run_child("policy_checkpoint", {"config": dump(cfg, workdir, "base"),
                                                "out": str(out)}, workdir, opts.timeout_s)
            emit({"name": "full_size_check.policy_checkpoint.write_s", "value": r["seconds"],
                  "unit": "s", "params": r["params"]})
            paths += [f"policy.pretrained_path={out}", "policy.config=null"]
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
                r = run_child(part, {"config": dump(part_cfg, workdir, part), "device": device,
                                     "workdir": str(workdir)}, workdir, opts.timeout_s)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                failed = True
                emit({"name": f"full_size_check.{part}.failed", "error": one_line(err)})
                continue
            for key, value in r["seconds"].items():
                emit({"name": f"full_size_check.{part}.{key}", "value": value, "unit": "s"})
            row = compare(part, r["peak_bytes"], planned(
                part_cfg, ROLE[part], r.get("prompt_tokens", PROMPT_TOKENS)),
                          opts.tolerance, device)
            emit({**row, **r.get("extra", {})})
            if not row["agrees"]:
                print(f"full_size_check: {part}: measured {row['value']} GB, planned "
                      f"{row['plan_gb']} GB ({row['ratio']}x): the plan is off by more than "
                      f"{opts.tolerance:.0%}", file=sys.stderr)
    except (ConfigError, ValueError, RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        print(f"full_size_check: {one_line(err)}", file=sys.stderr)
        return 1
    finally:
        if not opts.keep:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            for spec in workdir.glob("*.json"):
                spec.unlink()
            for spec in workdir.glob("*.yaml"):
                spec.unlink()
    return 1 if failed else 0


def dump(cfg, workdir: Path, name: str) -> str:
    path = workdir / f"{name}.yaml"
    cfg = cfg.copy()
    cfg.run_dir = str(workdir)  # not Hydra's run dir: no Hydra run here
    OmegaConf.save(cfg, path, resolve=True)
    return str(path)


# ---- the children ----------------------------------------------------------------------------
def float32_gemms_on_cpu(spec: dict, *modules) -> dict:
    """On a CPU, the bf16 linear layers of ``modules`` through float32 GEMMs: torch's bf16
    GEMM there is its reference loop without AVX-512 BF16 or AMX (``wmrl.cpu_linear``). Returns
    the result row's note: how many layers were switched."""
    import torch

    from wmrl.cpu_linear import bf16_linears_in_float32

    if spec["device"] != "cpu":
        return {}
    n = bf16_linears_in_float32(*(m for m in modules if isinstance(m, torch.nn.Module)))
    return {"float32_gemm_linears": n}


def child_release(spec: dict, cfg) -> dict:
    from wmrl.pipeline.rlinf.synthetic import write_release

    wm = to_container(cfg.env.world_model)
    t0 = time.perf_counter()
    info = write_release(spec["out"], wm["transformer"], wm["vae"], int(wm["height"]),
                         int(wm["width"]), states=max(2, int(spec["envs"])))
    return {**info, "seconds": round(time.perf_counter() - t0, 1)}


def child_import(spec: dict, cfg) -> dict:
    from wmrl.peak_memory import PeakMemory

    sys.path.insert(0, str(ROOT / "scripts"))
    from import_rlinf import run

    peak = PeakMemory("cpu")
    tr = cfg.env.world_model.transformer
    args = argparse.Namespace(dit=spec["dit"], vae=spec["vae"], dataset=spec["dataset"],
                              no_kir=not cfg.env.get("kir_reset", False), out=spec["out"],
                              num_heads=int(tr.num_attention_heads), text_dim=int(tr.text_dim),
                              shard_gb=2.0)
    t0 = time.perf_counter()
    run(args)
    return {"seconds": round(time.perf_counter() - t0, 1), "peak_gb": round(peak.peak() / GB, 3)}


def child_policy_checkpoint(spec: dict, cfg) -> dict:
    from wmrl.plan.meta import build_policy
    from wmrl.policies.openvla_oft import write_random_policy

    p = cfg.policy  # its architecture as make plan builds it (absent checkpoint: the 7B's)
    arch = build_policy({**to_container(p), "lora": None})[0].config
    t0 = time.perf_counter()
    nbytes = write_random_policy(spec["out"], arch, "bfloat16", str(p.unnorm_key))
    return {"seconds": round(time.perf_counter() - t0, 1), "params": nbytes // 2}


def first_states(cfg, n: int) -> tuple:
    """n observations from the configured initial states: uint8 [n, H, W, 3], tasks."""
    from wmrl.envs.initial_states import load_initial_states

    wm = cfg.env.world_model
    states = load_initial_states(cfg.env.initial_states).resized(int(wm.height), int(wm.width))
    idx = [i % len(states) for i in range(n)]
    return states.frames[idx].numpy(), [states.tasks[i] for i in idx]


def child_world_model(spec: dict, cfg) -> dict:
    import numpy as np

    from wmrl.fit import build_datamodule
    from wmrl.peak_memory import PeakMemory
    from wmrl.rollout.workers import RolloutActor

    peak = PeakMemory(spec["device"])
    env = dict(build_datamodule(cfg).pool.env_cfg)
    t0 = time.perf_counter()
    actor = RolloutActor(env=env, shared_device=spec["device"], name="env-check")
    gemms = float32_gemms_on_cpu(spec, *(m for e in actor.envs
                                         for m in (e.model, e.reward_model)))
    t1 = time.perf_counter()
    peak.reset()
    actor.reset(0, seed=0)
    t2 = time.perf_counter()
    n, chunk = int(env["num_envs"]), int(env["chunk"])
    actions = np.random.default_rng(0).uniform(-1, 1, (n, chunk, 7)).astype(np.float32)
    actions[..., -1] = np.sign(actions[..., -1])
    _, record = actor.chunk_step(0, actions)
    t3 = time.perf_counter()
    return {"seconds": {"load_s": round(t1 - t0, 1), "reset_s": round(t2 - t1, 1),
                        "chunk_step_s": round(t3 - t2, 1)},
            "peak_bytes": peak.peak(),  # no prompt: the env role's plan does not read one
            "extra": {"envs": n, "rewards_finite": bool(np.isfinite(record["rewards"]).all()),
                      **gemms}}


def child_rollout(spec: dict, cfg) -> dict:
    from wmrl.fit import build_datamodule
    from wmrl.peak_memory import PeakMemory
    from wmrl.rollout.workers import RolloutActor

    peak = PeakMemory(spec["device"])
    policy = dict(build_datamodule(cfg).pool.policy_cfg)
    n = int(cfg.rollout.num_envs)
    image, tasks = first_states(cfg, n)
    t0 = time.perf_counter()
    actor = RolloutActor(policy=policy, shared_device=spec["device"], name="policy-check")
    gemms = float32_gemms_on_cpu(spec, actor.policy)
    t1 = time.perf_counter()
    peak.reset()
    actions, record = actor.sample(0, {"image": image, "task": tasks},
                                   float(cfg.rollout.temperature), seed=0)
    t2 = time.perf_counter()
    return {"seconds": {"load_s": round(t1 - t0, 1), "sample_s": round(t2 - t1, 1)},
            "peak_bytes": peak.peak(),
            "prompt_tokens": len(actor.policy.prompt.encode_one(tasks[0])),
            "extra": {"envs": n, "actions": list(actions.shape), **gemms}}


def child_grpo(spec: dict, cfg) -> dict:
    import lightning as L
    import torch

    from wmrl.fit import build_module
    from wmrl.interfaces import TrajectoryBatch
    from wmrl.peak_memory import PeakMemory
    from wmrl.rollout.given import GivenRollouts

    peak = PeakMemory(spec["device"])
    n = int(cfg.rollout.num_envs)  # groups of 2: one success, one failure each
    image, tasks = first_states(cfg, n)
    per_chunk = int(cfg.rollout.chunk) * 7
    g = torch.Generator().manual_seed(0)
    rewards, dones = torch.zeros(n, int(cfg.rollout.chunk)), torch.zeros(
        n, int(cfg.rollout.chunk), dtype=torch.bool)
    rewards[0::2, -1], dones[:, -1] = 1.0, True
    batch = TrajectoryBatch(
        image=torch.from_numpy(image)[:, None], task=tasks,
        tokens=torch.randint(0, 256, (n, 1, per_chunk), generator=g),
        logprobs=torch.full((n, 1, per_chunk), -math.log(256.0)), rewards=rewards,
        dones=dones, success=rewards.sum(1) > 0, version=0)
    t0 = time.perf_counter()
    module = build_module(cfg)
    gemms = float32_gemms_on_cpu(spec, module)
    t1 = time.perf_counter()
    dev = torch.device(spec["device"])
    trainer = L.Trainer(accelerator=dev.type, devices=[dev.index or 0] if dev.type != "cpu"
                        else 1, precision=cfg.trainer.precision, max_steps=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=spec["workdir"])
    peak.reset()
    trainer.fit(module, datamodule=GivenRollouts([batch]))
    t2 = time.perf_counter()
    m = module.last_metrics
    if not all(math.isfinite(m[k]) for k in ("train/loss", "train/grad_norm")):
        raise RuntimeError(f"the GRPO update gave a non-finite loss or gradient norm: {m}")
    trained = sum(p.numel() for p in module.policy.parameters() if p.requires_grad)
    return {"seconds": {"build_s": round(t1 - t0, 1), "update_s": round(t2 - t1, 1)},
            "peak_bytes": peak.peak(),
            "prompt_tokens": len(module.policy.prompt.encode_one(tasks[0])),
            "extra": {"trained_params": trained, "micro_batches": 2,
                      "optimizer_steps": m["train/optimizer_steps"], **gemms}}


CHILDREN = {"release": child_release, "import": child_import,
            "policy_checkpoint": child_policy_checkpoint, "world_model": child_world_model,
            "rollout": child_rollout, "grpo_lora": child_grpo, "grpo_full": child_grpo}


def child(part: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    cfg = OmegaConf.load(spec["config"])
    print(json.dumps(CHILDREN[part](spec, cfg)), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--part":
        sys.exit(child(sys.argv[2], sys.argv[3]))
    sys.exit(main(sys.argv[1:]))
