"""The policy in the world model beside the policy in the simulator, from the same first frame:
the picture of the field's main failure, a world model that the policy learns to fool.

``imagined_vs_real`` runs the policy on ``scenes`` fixed scenes of a task (state ids
0..scenes-1 of the simulator's evaluation set) twice: in the simulator, and in a
``WanWorldModelEnv`` started from the simulator's own first frame of each scene, with the run's
world model, reward, chunk and episode length. Each scene gives the two videos, the
simulator's success, and the world model's success (the reward's verdict), return and peak
score. ``side_by_side_video`` puts them in one video (imagined | real); the shorter rollout
holds its last frame. ``scripts/imagined_vs_real.py`` makes the docs figure. At every eval
``SimEvalCallback`` (``side_by_side``) runs the world-model half alone
(``imagined_beside_eval``): the simulator's half is its sim eval's own episodes of the same
scenes, and it logs ``paired_gap``'s figures.

The paired closed-loop gap of N scenes, with w_i, s_i in {0, 1} the world model's and the
simulator's verdict on scene i and d_i = w_i - s_i:

    gap = mean(d) = mean(w) - mean(s),    agreement = mean(1[w_i = s_i]),

with the 95% t-interval of mean(d). Var(d) = P(w != s) - gap^2, so the interval's half-width
is about 1.96 * sqrt((1 - agreement) / N): it narrows as N grows and as the two agree more.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from hydra.utils import get_object

from wmrl.build import build
from wmrl.finetune.world_model import episode_initial_states
from wmrl.measure.stats import t_interval
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import TabletopVecEnv, initial_frames

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
    actions: np.ndarray | None = None  # float32 [T', 7]: what the policy did in imagination
    replayed_success: bool | None = None  # those actions in the simulator (replay_in_simulator)


def imagined_vs_real(policy, env: dict, task: str, scenes: int, chunk: int,
                     max_episode_steps: int, sim_env: dict | None = None,
                     temperature: float = 1.0, seed: int = 0,
                     weights: tuple[dict, dict | None] | None = None,
                     num_envs: int = 16) -> list[SceneRollouts]:
    """See the module docstring. ``env``: the fit's world-model env spec (its ``reward``
    included); ``sim_env``: ``TabletopEnv`` kwargs of the simulator's scenes (image size,
    camera, ``eval_seed``); ``weights``: (world-model, reward) weights to load over the spec's
    (PACE's current version, so the picture shows the world model the rollouts use);
    ``num_envs``: simulator envs at a time (``evaluate_policy`` seeds the policy per batch of
    them, so with ``scenes >= num_envs`` and the same ``seed`` the real episodes are the sim
    eval's own first ``scenes``). The process's torch RNG is left as it was (building the
    models may draw from it): an eval during training leaves training alone."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        _check_env(env)
        was_training = policy.training
        policy.eval()
        kw = {k: v for k, v in (sim_env or {}).items() if k != "_target_"}
        kw.update(max_episode_steps=max_episode_steps, terminate_on_success=True)
        vec = TabletopVecEnv(min(scenes, num_envs), **kw)
        try:
            specs = [EpisodeSpec(task, state_id=i) for i in range(scenes)]
            real = list(rollout_episodes(vec, PolicyActionSource(policy, temperature, seed=seed),
                                         specs, seed=seed))
        finally:
            vec.close()
            policy.train(was_training)
        return _imagine(policy, env, real, chunk, max_episode_steps, temperature, seed,
                        weights, [ep.frames for ep in real], [bool(ep.success) for ep in real])


def imagined_beside_eval(policy, env: dict, task: str, sim_success: list[bool],
                         real_videos: list[np.ndarray], chunk: int, max_episode_steps: int,
                         sim_env: dict | None = None, temperature: float = 1.0, seed: int = 0,
                         weights: tuple[dict, dict | None] | None = None
                         ) -> list[SceneRollouts]:
    """The world-model half alone, beside a simulator eval that already ran
    (``evaluate_policy``, what ``SimEvalCallback`` does): scene i (state i of ``sim_env``'s
    set, ``initial_frames``) imagined from the simulator's first frame, paired with that
    eval's verdict ``sim_success[i]``; ``len(sim_success)`` scenes, all imagined as one batch.
    ``real_videos``: the eval's videos of its first scenes (``SceneRollouts.real``; the others
    get their first frame only). Arguments and RNG as ``imagined_vs_real``."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        _check_env(env)
        kw = {k: v for k, v in (sim_env or {}).items()
              if k not in ("_target_", "eval_seed", "max_episode_steps")}
        first, tasks = initial_frames(task, len(sim_success),
                                      seed=int((sim_env or {}).get("eval_seed", 0)), **kw)
        starts = [SimpleNamespace(frames=f[None], task=t) for f, t in zip(first, tasks)]
        real = [*real_videos[:len(first)], *(s.frames for s in starts[len(real_videos):])]
        return _imagine(policy, env, starts, chunk, max_episode_steps, temperature, seed,
                        weights, real, [bool(s) for s in sim_success])


def replay_in_simulator(results: list[SceneRollouts], task: str, sim_env: dict | None = None
                        ) -> list[np.ndarray]:
    """Each scene's imagined actions (``SceneRollouts.actions``) stepped in the simulator from
    the same scene (state ``scene`` of ``sim_env``'s set), until success or the actions run
    out: sets ``replayed_success``, returns the replayed videos (uint8 [n + 1, H, W, 3]).
    The simulator is deterministic, so this is the truth about exactly the actions the world
    model judged: an imagined success whose actions fail here is one the policy can learn to
    fool the world model with."""
    kw = {k: v for k, v in (sim_env or {}).items() if k != "_target_"}
    kw.update(terminate_on_success=True)
    vec = TabletopVecEnv(1, **kw)
    env, videos = vec.envs[0], []
    try:
        for r in results:
            if r.actions is None:
                raise ValueError(f"scene {r.scene} has no imagined actions to replay")
            obs, info = env.reset(options={"task": task, "state_id": r.scene})
            frames, ok = [obs["image"]], bool(info["success"])
            for a in r.actions:
                if ok:
                    break
                obs, _, term, trunc, info = env.step(np.asarray(a, np.float64))
                frames.append(obs["image"])
                ok = bool(info["success"])
                if term or trunc:
                    break
            r.replayed_success = ok
            videos.append(np.stack(frames))
    finally:
        vec.close()
    return videos


def paired_gap(results: list[SceneRollouts], prefix: str = "sim/paired") -> dict[str, float]:
    """The paired closed-loop gap of the module docstring over ``results``' scenes:
    ``<prefix>_scenes``, ``_wm_success``, ``_sim_success``, ``_gap`` (wm - sim, a difference of
    success rates: x100 for points), ``_agreement`` and, with 2 scenes or more,
    ``_gap_ci95_low`` / ``_gap_ci95_high``. Where every scene was replayed
    (``replay_in_simulator``), with r_i the simulator's verdict on the imagined actions:
    ``_replay_success`` = mean(r), ``_replay_agreement`` = mean(1[w_i = r_i]) and
    ``_replay_precision`` = P(r = 1 | w = 1) (NaN without an imagined success): how often what
    the world model calls a success is one."""
    if not results:
        raise ValueError("paired_gap needs at least one scene")
    w = np.array([r.imagined_success for r in results], dtype=float)
    s = np.array([r.real_success for r in results], dtype=float)
    out = {f"{prefix}_scenes": len(results), f"{prefix}_wm_success": float(w.mean()),
           f"{prefix}_sim_success": float(s.mean()), f"{prefix}_gap": float((w - s).mean()),
           f"{prefix}_agreement": float((w == s).mean())}
    if len(results) > 1:
        _, lo, hi = t_interval(w - s)
        out.update({f"{prefix}_gap_ci95_low": lo, f"{prefix}_gap_ci95_high": hi})
    if all(r.replayed_success is not None for r in results):
        rep = np.array([r.replayed_success for r in results], dtype=float)
        out.update({f"{prefix}_replay_success": float(rep.mean()),
                    f"{prefix}_replay_agreement": float((w == rep).mean()),
                    f"{prefix}_replay_precision":
                        float(rep[w == 1].mean()) if w.any() else float("nan")})
    return out


def _check_env(env: dict) -> None:
    if env.get("_target_") != WORLD_MODEL_ENV:
        raise ValueError(f"imagined | real needs a world-model env ({WORLD_MODEL_ENV}), got "
                         f"{env.get('_target_')}")


def _imagine(policy, env, starts, chunk, max_episode_steps, temperature, seed, weights, real,
             real_success) -> list[SceneRollouts]:
    """Every scene in one batched ``WanWorldModelEnv``, scene i from ``starts[i].frames[0]``
    (an episode, or its first frame) with its task ``starts[i].task``."""
    scenes = len(starts)
    # (built by hand: Hydra would turn the InitialStates dataclass into a config). The
    # resample check's second draw feeds a training signal, not the verdict (its own RNG
    # stream): left out, one chunk per episode less
    spec = {k: v for k, v in env.items() if k not in ("_target_", "initial_states", "num_envs",
                                                      "reward")}
    spec.update(resample_check=False, resample_return=None)
    wm = get_object(WORLD_MODEL_ENV)(
        **spec, reward=build(env["reward"]), initial_states=episode_initial_states(starts),
        num_envs=scenes,
        group_size=1, chunk=chunk, max_episode_steps=max_episode_steps, return_frames=True)
    if weights is not None:
        wm.load_world_model_weights(weights[0], reward_state_dict=weights[1])
    was_training = policy.training
    policy.eval()
    try:
        obs = wm.reset(seed=seed, state_ids=list(range(scenes)))
        frames, taken, peak = [], [], torch.zeros(scenes)
        generator = torch.Generator().manual_seed(seed)
        info = {}
        for _ in range(max_episode_steps // chunk):
            actions = policy.sample(obs, temperature, generator=generator).actions
            obs, _, _, _, info = wm.chunk_step(actions.float())
            frames.append(info["frames"].cpu().numpy())
            taken.append(actions.float().cpu().numpy())
            peak = torch.maximum(peak, info["scores"].amax(1).cpu())
            if bool((info["success"] | (info["episode_len"] >= max_episode_steps)).all()):
                break  # every scene ended: imagined success, or out of steps
    finally:
        policy.train(was_training)
    video = np.concatenate(frames, 1)  # [scenes, steps, H, W, 3], zeros once a row ended
    acts = np.concatenate(taken, 1)  # [scenes, steps, 7], as the env took them
    out = []
    for i in range(scenes):
        n = int(info["episode_len"][i])
        out.append(SceneRollouts(
            scene=i, real=real[i], imagined=np.concatenate([starts[i].frames[:1], video[i, :n]]),
            real_success=real_success[i], imagined_success=bool(info["success"][i]),
            imagined_return=float(info["return"][i]), peak_score=float(peak[i]),
            actions=acts[i, :n]))
    return out
