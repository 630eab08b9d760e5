"""The policy in the world model beside the policy in the simulator, from the same first frame:
the picture of the field's main failure, a world model that the policy learns to fool.

``imagined_vs_real`` runs the policy on ``scenes`` fixed scenes of a task (state ids
0..scenes-1 of the simulator's evaluation set) twice: in the simulator, and in a
``WanWorldModelEnv`` started from the simulator's own first frame of each scene, with the run's
world model, reward, chunk and episode length. Each scene gives the two videos, the
simulator's success, and the world model's success (the reward's verdict), return and peak
score. ``side_by_side_video`` puts them in one video (imagined | real); the shorter rollout
holds its last frame. ``SimEvalCallback`` does this at every eval (``side_by_side``);
``scripts/imagined_vs_real.py`` makes the docs figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hydra.utils import get_object

from wmrl.build import build
from wmrl.finetune.world_model import episode_initial_states
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import TabletopVecEnv

WORLD_MODEL_ENV = "wmrl.envs.wan_env.WanWorldModelEnv"


@dataclass
class SceneRollouts:
    scene: int
    real: np.ndarray  # uint8 [T+1, H, W, 3], the first frame included
    imagined: np.ndarray  # uint8 [T'+1, H, W, 3], the same first frame, then imagined
    real_success: bool
    imagined_success: bool  # the reward's verdict (peak score >= env.success_threshold)
    imagined_return: float
    peak_score: float


def imagined_vs_real(policy, env: dict, task: str, scenes: int, chunk: int,
                     max_episode_steps: int, sim_env: dict | None = None,
                     temperature: float = 1.0, seed: int = 0,
                     weights: tuple[dict, dict | None] | None = None) -> list[SceneRollouts]:
    """See the module docstring. ``env``: the fit's world-model env spec (its ``reward``
    included); ``sim_env``: ``TabletopEnv`` kwargs of the simulator's scenes (image size,
    camera, ``eval_seed``); ``weights``: (world-model, reward) weights to load over the spec's
    (PACE's current version, so the picture shows the world model the rollouts use). The
    process's torch RNG is left as it was (building the models may draw from it): an eval
    during training leaves training alone."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        return _imagined_vs_real(policy, env, task, scenes, chunk, max_episode_steps,
                                 sim_env, temperature, seed, weights)


def _imagined_vs_real(policy, env, task, scenes, chunk, max_episode_steps, sim_env,
                      temperature, seed, weights) -> list[SceneRollouts]:
    if env.get("_target_") != WORLD_MODEL_ENV:
        raise ValueError(f"imagined_vs_real needs a world-model env ({WORLD_MODEL_ENV}), got "
                         f"{env.get('_target_')}")
    was_training = policy.training
    policy.eval()
    kw = {k: v for k, v in (sim_env or {}).items() if k != "_target_"}
    kw.update(max_episode_steps=max_episode_steps, terminate_on_success=True)
    vec = TabletopVecEnv(min(scenes, 16), **kw)
    try:
        specs = [EpisodeSpec(task, state_id=i) for i in range(scenes)]
        real = list(rollout_episodes(vec, PolicyActionSource(policy, temperature, seed=seed),
                                     specs, seed=seed))
    finally:
        vec.close()
    # (built by hand: Hydra would turn the InitialStates dataclass into a config)
    spec = {k: v for k, v in env.items() if k not in ("_target_", "initial_states", "num_envs",
                                                      "reward")}
    wm = get_object(WORLD_MODEL_ENV)(
        **spec, reward=build(env["reward"]), initial_states=episode_initial_states(real),
        num_envs=scenes, group_size=1, chunk=chunk, max_episode_steps=max_episode_steps,
        return_frames=True)
    if weights is not None:
        wm.load_world_model_weights(weights[0], reward_state_dict=weights[1])
    try:
        obs = wm.reset(seed=seed, state_ids=list(range(scenes)))
        frames, peak = [], torch.zeros(scenes)
        generator = torch.Generator().manual_seed(seed)
        info = {}
        for _ in range(max_episode_steps // chunk):
            actions = policy.sample(obs, temperature, generator=generator).actions
            obs, _, _, _, info = wm.chunk_step(actions.float())
            frames.append(info["frames"].cpu().numpy())
            peak = torch.maximum(peak, info["scores"].amax(1).cpu())
            if bool((info["success"] | (info["episode_len"] >= max_episode_steps)).all()):
                break  # every scene ended: imagined success, or out of steps
    finally:
        policy.train(was_training)
    video = np.concatenate(frames, 1)  # [scenes, steps, H, W, 3], zeros once a row ended
    out = []
    for i, ep in enumerate(real):
        n = int(info["episode_len"][i])
        out.append(SceneRollouts(
            scene=i, real=ep.frames, imagined=np.concatenate([ep.frames[:1], video[i, :n]]),
            real_success=bool(ep.success), imagined_success=bool(info["success"][i]),
            imagined_return=float(info["return"][i]), peak_score=float(peak[i])))
    return out
