"""The tiny action-conditioned Wan built from scratch on simulator trajectories (the shipped
asset; ``scripts/train_world_model.py`` is its argument parsing, its docstring the stages):
the VAE and the DiT trained through the one world-model trainer's ``train_stage`` on cached
clips, then the metrics (``wmrl.finetune.world_model``'s quality and replay checks) written
to ``<out_dir>/metrics.json``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from wmrl.envs.initial_states import synthetic_initial_states
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.finetune import world_model as T
from wmrl.finetune.world_model_module import train_stage
from wmrl.io.atomic import check_output_dir, write_text
from wmrl.rewards.resnet import ResNetSuccessReward
from wmrl.world_model.action_wan import ActionWanModel


def model_config(cfg: dict) -> dict:
    """``model`` of the config, the latent statistics' nulls as zeros / ones (set from the
    data once the VAE is trained)."""
    m = {k: (dict(v) if isinstance(v, dict) else v) for k, v in cfg["model"].items()}
    z = int(m["vae"]["z_dim"])
    if m["vae"].get("latents_mean") is None:
        m["vae"]["latents_mean"] = [0.0] * z
    if m["vae"].get("latents_std") is None:
        m["vae"]["latents_std"] = [1.0] * z
    return m


def make_env_factory(model: ActionWanModel, cfg: dict):
    """``factory(num_envs, states)``: a WanWorldModelEnv on ``model`` and ``eval``'s reward."""
    ev = cfg["eval"]
    # raw p(success): replay_agreement sweeps the threshold over one replay
    reward = ResNetSuccessReward(checkpoint=ev["reward_checkpoint"], round=False)

    def factory(num_envs, states):
        return WanWorldModelEnv(model, reward, states, num_envs=num_envs, group_size=1,
                                num_inference_steps=int(ev["num_inference_steps"]),
                                max_episode_steps=int(ev["max_episode_steps"]),
                                height=cfg["model"]["height"], width=cfg["model"]["width"],
                                seed=int(cfg["seed"]))
    return factory


@torch.no_grad()
def chunk_step_seconds(model: ActionWanModel, cfg: dict, num_envs: int = 32,
                       threads: int = 1) -> float:
    """Wall time of one WanWorldModelEnv.chunk_step for ``num_envs`` envs (mean of 2)."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        h, w = cfg["model"]["height"], cfg["model"]["width"]
        factory = make_env_factory(model, cfg)
        env = factory(num_envs, synthetic_initial_states(4, h, w, context=False))
        env.max_episode_steps = 10_000
        env.success_threshold = 2.0  # never terminate: time full batches
        env.reset(state_ids=torch.arange(num_envs) % 4)
        a = torch.rand(num_envs, 8, 7, generator=torch.Generator().manual_seed(0)) * 2 - 1
        env.chunk_step(a)
        t0 = time.perf_counter()
        for _ in range(2):
            env.chunk_step(a)
        return (time.perf_counter() - t0) / 2
    finally:
        torch.set_num_threads(old)


def build_world_model(cfg: dict, log=print) -> dict:
    """The output folders checked before any work, then the whole build under
    ``cfg["threads"]`` torch threads and flushed denormals; the caller's thread count is
    restored after (it is process-wide state). Returns the metrics."""
    force = bool(cfg.get("overwrite"))  # before any work: no output over a user's files
    check_output_dir(cfg["out_dir"], "world_model", force, key="out_dir")
    if (cfg.get("initial_states") or {}).get("out_dir"):
        check_output_dir(cfg["initial_states"]["out_dir"], "initial_states", force,
                         key="initial_states.out_dir")
    threads = torch.get_num_threads()
    try:
        return _build(cfg, log)
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)


def _build(cfg: dict, log=print) -> dict:
    log = log or (lambda msg: None)
    torch.set_num_threads(int(cfg.get("threads", 1)))
    torch.set_flush_denormal(True)  # tiny nets drift into subnormals, which are slow on CPU
    torch.manual_seed(int(cfg["seed"]))
    out_dir = Path(cfg["out_dir"])
    t_start = time.time()
    tasks = cfg.get("tasks")
    metrics: dict = {"tasks": tasks}

    if cfg.get("initial_states") and cfg["initial_states"].get("out_dir"):
        s = cfg["initial_states"]
        p = T.write_sim_initial_states(s["out_dir"], s.get("tasks") or tasks,
                                       int(s["num_states"]), int(s["eval_seed"]),
                                       (cfg["model"]["height"], cfg["model"]["width"]))
        log(f"initial states -> {p}")

    train_eps = T.load_episodes(cfg["train_dirs"], tasks)
    train = T.build_clips(train_eps)
    val_eps = T.load_episodes(cfg["val_dirs"], tasks) if cfg.get("val_dirs") else []
    val = T.build_clips(val_eps) if val_eps else None
    size = tuple(train.frames.shape[2:4])
    if size != (cfg["model"]["height"], cfg["model"]["width"]):
        raise ValueError(f"data frames are {size}, model.height/width are "
                         f"{(cfg['model']['height'], cfg['model']['width'])}: collect at that "
                         "size (env.image_size) or change model.height/width")
    metrics.update(train_episodes=len(train_eps), train_clips=len(train),
                   val_episodes=len(val_eps), val_clips=0 if val is None else len(val))
    log(f"{len(train_eps)} train episodes -> {len(train)} clips; {len(val_eps)} val episodes")

    mcfg = model_config(cfg)
    model = ActionWanModel.from_config(mcfg)
    if cfg.get("init_from"):  # continue from (or, with transformer_train.steps=0, evaluate)
        model = ActionWanModel.from_pretrained(cfg["init_from"])
        vae_losses = []
    elif cfg.get("vae_from"):
        trained_vae = ActionWanModel.from_pretrained(cfg["vae_from"]).vae
        model.vae.load_state_dict(trained_vae.state_dict())
        model.vae.register_to_config(latents_mean=list(trained_vae.config.latents_mean),
                                     latents_std=list(trained_vae.config.latents_std))
        vae_losses = []
    else:
        v = dict(cfg["vae_train"])
        if v.get("init_from"):  # fine-tune a trained VAE (e.g. on a new camera) instead of fresh
            model.vae.load_state_dict(ActionWanModel.from_pretrained(v["init_from"]).vae.state_dict())
        t0 = time.time()
        vae_losses = train_stage(model, "vae", v, train, int(cfg["seed"]), log)
        metrics["vae_train_seconds"] = time.time() - t0
        T.set_latent_stats(model.vae, train)
    model.vae.eval().requires_grad_(False)
    T.refresh_latent_buffers(model)

    t0 = time.time()
    latents = T.encode_clips(model, train)
    log(f"encoded {len(train)} clips -> {tuple(latents.shape)} in {time.time() - t0:.0f}s")
    t0 = time.time()
    dit_losses = train_stage(model, "dit", dict(cfg["transformer_train"]),
                             (latents, train.actions), int(cfg["seed"]), log, episodes=train_eps)
    metrics["transformer_train_seconds"] = time.time() - t0
    if dit_losses or not cfg.get("init_from") or Path(cfg["init_from"]) != out_dir:
        model.save_pretrained(out_dir)
    metrics["checkpoint_bytes"] = sum(f.stat().st_size for f in out_dir.rglob("*.safetensors"))

    def window_mean(xs, first):
        """Mean loss over the first / last tenth of the steps (at least 1, at most 50)."""
        k = min(50, max(1, len(xs) // 10))
        w = xs[:k] if first else xs[-k:]
        return float(sum(w) / len(w)) if w else None

    metrics.update(vae_loss_first=window_mean(vae_losses, True),
                   vae_loss_last=window_mean(vae_losses, False),
                   dit_loss_first=window_mean(dit_losses, True),
                   dit_loss_last=window_mean(dit_losses, False))
    ev = cfg["eval"]
    if val is not None:
        metrics.update(T.vae_quality(model, val, int(ev["max_clips"])))
        metrics.update(T.prediction_quality(model, val, int(ev["num_inference_steps"]),
                                            int(ev["max_clips"]), seed=int(cfg["seed"])))
        if ev.get("reward_checkpoint"):
            eps = val_eps[: int(ev["replay_episodes"])]
            metrics.update(T.replay_agreement(
                make_env_factory(model, cfg), eps,
                max_chunks=int(ev["max_episode_steps"]) // T.CHUNK,
                success_threshold=float(ev["success_threshold"])))
    metrics["chunk_step_s_b32_1thread"] = chunk_step_seconds(model, cfg, 32, 1) if ev.get(
        "reward_checkpoint") else None
    metrics["total_seconds"] = time.time() - t_start
    write_text(out_dir / "metrics.json", json.dumps(metrics, indent=2))  # atomically
    log(json.dumps(metrics, indent=2))
    return metrics
