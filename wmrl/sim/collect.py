"""Tabletop rollouts (the scripted expert, or a policy) collected into a trajectory dataset
(``scripts/collect.py`` is its argument parsing; the format: ``dataset.py``). A
``collect.out_dir`` holding anything but an earlier collection is refused in one line before
any work (``collect.overwrite=true`` writes there anyway)."""

from __future__ import annotations

import time

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from wmrl.io.atomic import check_output_dir, mark_output_dir
from wmrl.sim.dataset import TrajectoryWriter
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import STATE_DIM, TabletopVecEnv, task_by_name


def env_kwargs(cfg: DictConfig) -> dict:
    """``env`` as ``TabletopVecEnv``'s keyword arguments."""
    kw = OmegaConf.to_container(cfg.env, resolve=True)
    kw.pop("_target_", None)
    return kw


def build_source(cfg: DictConfig):
    """``collect.policy`` (sampled at ``collect.temperature``) when given, else ``expert``."""
    if cfg.collect.get("policy") is not None:
        return PolicyActionSource(instantiate(cfg.collect.policy), cfg.collect.temperature,
                                  seed=cfg.collect.seed)
    return instantiate(cfg.expert)


def episode_specs(cfg: DictConfig) -> list[EpisodeSpec]:
    """``collect.episodes_per_task`` episodes of each task: the held-out eval states
    (``use_eval_states``) or seeds of their own."""
    c = cfg.collect
    specs = []
    for k, task in enumerate(c.tasks):
        name = task_by_name(task).name
        for j in range(c.episodes_per_task):
            if c.use_eval_states:
                specs.append(EpisodeSpec(name, state_id=j))
            else:
                specs.append(EpisodeSpec(name, seed=c.seed * 1_000_000 + k * 100_000 + j))
    return specs


def collect(cfg: DictConfig, source=None) -> dict:
    """Roll out ``source`` (default: built from cfg) and write the dataset; returns a summary."""
    c = cfg.collect
    check_output_dir(c.out_dir, "collect", c.overwrite, key="collect.out_dir",
                     force_flag="collect.overwrite=true")
    kw = env_kwargs(cfg)
    kw["terminate_on_success"] = c.terminate_on_success
    source = build_source(cfg) if source is None else source
    specs = episode_specs(cfg)
    vec = TabletopVecEnv(c.num_envs, **kw)
    e0 = vec.envs[0]
    meta = {
        "env": kw,
        "source": OmegaConf.to_container(cfg.expert if c.get("policy") is None else c.policy,
                                         resolve=True),
        "collect": OmegaConf.to_container(c, resolve=True),
    }
    t0 = time.time()
    n_ok, n = 0, 0
    try:
        with TrajectoryWriter(c.out_dir, (e0.height, e0.width),
                              tasks=[task_by_name(t).instruction for t in c.tasks],
                              state_dim=STATE_DIM, shard_size=c.shard_size,
                              extra_meta=meta, overwrite=c.overwrite) as writer:
            post = c.post_success_steps if not c.terminate_on_success else None
            for ep in rollout_episodes(vec, source, specs, post_success_steps=post,
                                       seed=c.seed):
                writer.add(ep)
                n += 1
                n_ok += ep.success
        mark_output_dir(c.out_dir, "collect", ["meta.json", *(s["file"] for s in writer.shards)])
    finally:
        vec.close()
    return {"out_dir": str(c.out_dir), "episodes": n, "success_rate": n_ok / max(n, 1),
            "seconds": round(time.time() - t0, 2)}


def load_config(config: str, overrides: list[str]) -> DictConfig:
    """``config`` (a yaml with ``env``, ``expert``, ``collect``) with dot-list ``overrides``."""
    cfg = OmegaConf.load(config)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))
    missing = {"env", "expert", "collect"} - set(cfg.keys())
    if missing:
        raise KeyError(f"{config} lacks the sections {sorted(missing)} (see "
                       "conf/sim/tabletop.yaml)")
    return cfg
