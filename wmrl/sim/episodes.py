"""Roll out an action source (scripted expert or policy) in simulator envs -> Episodes.

An action source is any callable ``source(obs) -> actions [B, C, 7]`` (numpy or torch) on a
batched observation {"image": uint8 [B, H, W, 3], "task": list[str], "state": [B, S]}; it
may define ``reset(batch_size, seed)``, called before each batch of episodes. C is the
chunk length: 1 for the closed-loop expert, 8 for a VLA policy. ``PolicyActionSource``
adapts a ``wmrl.interfaces.Policy``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from wmrl.sim.dataset import Episode
from wmrl.sim.tabletop import TabletopVecEnv, task_by_name


@dataclass(frozen=True)
class EpisodeSpec:
    task: str
    state_id: int | None = None  # a fixed initial state, or None for a random one
    seed: int | None = None  # the env RNG seed for a random initial state


class PolicyActionSource:
    """``Policy.sample(obs, temperature).actions`` [B, 8, 7] as an action source."""

    def __init__(self, policy, temperature: float = 1.0, seed: int = 0):
        self.policy = policy
        self.temperature = temperature
        self.seed = seed

    def reset(self, batch_size: int, seed: int | None = None) -> None:
        import torch

        self.generator = torch.Generator().manual_seed(self.seed if seed is None else seed)

    def __call__(self, obs: dict) -> np.ndarray:
        import torch

        if not hasattr(self, "generator"):
            self.reset(len(obs["task"]))
        batch = {"image": torch.from_numpy(np.ascontiguousarray(obs["image"])),
                 "task": list(obs["task"])}
        with torch.no_grad():
            out = self.policy.sample(batch, self.temperature, generator=self.generator)
        return out.actions.detach().float().cpu().numpy()


def _as_actions(actions, batch_size: int) -> np.ndarray:
    a = actions.detach().cpu().numpy() if hasattr(actions, "detach") else np.asarray(actions)
    if a.ndim == 2:
        a = a[:, None, :]
    if a.ndim != 3 or a.shape[0] != batch_size or a.shape[2] != 7:
        raise ValueError(f"action source must return [B={batch_size}, C, 7] actions, got "
                         f"{a.shape}")
    return a.astype(np.float64)


def rollout_episodes(
    vec: TabletopVecEnv,  # or any vector env with its ``envs`` (e.g. LiberoVecEnv)
    source: Callable[[dict], np.ndarray],
    specs: list[EpisodeSpec],
    post_success_steps: int | None = None,
    seed: int = 0,
) -> Iterator[Episode]:
    """Run ``specs`` in batches of ``vec.num_envs`` and yield one Episode per spec (in order).

    An episode ends when its env terminates/truncates, or ``post_success_steps`` control steps
    after its first success (so success episodes end with a few success frames, which the
    reward classifier needs); None keeps the env's own termination rule.
    """
    b = vec.num_envs
    for start in range(0, len(specs), b):
        batch = list(specs[start : start + b])
        n_real = len(batch)
        batch += [batch[-1]] * (b - n_real)  # idle envs rerun the last spec, dropped later
        opts = [
            {"task": s.task} | ({} if s.state_id is None else {"state_id": s.state_id})
            for s in batch
        ]
        resets = [env.reset(seed=s.seed, options=o) for env, s, o in zip(vec.envs, batch, opts)]
        obs_list = [obs for obs, _ in resets]
        instructions = [obs["task"] for obs in obs_list]
        if hasattr(source, "reset"):
            source.reset(b, seed=seed + start)
        frames = [[o["image"]] for o in obs_list]
        states = [[o["state"]] for o in obs_list]
        labels = [[bool(info["success"])] for _, info in resets]
        actions: list[list[np.ndarray]] = [[] for _ in range(b)]
        first_success = [0 if labels[i][0] else -1 for i in range(b)]
        active = np.arange(b) < n_real
        while active.any():
            obs = {
                "image": np.stack([o["image"] for o in obs_list]),
                "task": [o["task"] for o in obs_list],
                "state": np.stack([o["state"] for o in obs_list]),
            }
            chunk = _as_actions(source(obs), b)
            for i, env in enumerate(vec.envs):
                for a in chunk[i]:
                    if not active[i]:
                        break
                    o, _, term, trunc, info = env.step(a)
                    obs_list[i] = o
                    frames[i].append(o["image"])
                    states[i].append(o["state"])
                    labels[i].append(info["success"])
                    actions[i].append(a.astype(np.float32))
                    t = len(actions[i])
                    if info["success"] and first_success[i] < 0:
                        first_success[i] = t
                    after = post_success_steps is not None and first_success[i] >= 0 and (
                        t - first_success[i] >= post_success_steps
                    )
                    if term or trunc or after:
                        active[i] = False
        for i in range(n_real):
            yield Episode(
                frames=np.stack(frames[i]),
                actions=np.stack(actions[i]) if actions[i] else np.zeros((0, 7), np.float32),
                success_labels=np.array(labels[i], dtype=bool),
                task=instructions[i],
                states=np.stack(states[i]),
                state_id=-1 if batch[i].state_id is None else int(batch[i].state_id),
            )


def evaluate_success(
    source: Callable[[dict], np.ndarray],
    tasks: list[str],
    n_states: int,
    num_envs: int = 8,
    seed: int = 0,
    **env_kwargs,
) -> dict[str, float]:
    """Success rate (success at any step) per task over the fixed initial states 0..n-1."""
    vec = TabletopVecEnv(num_envs, **env_kwargs)
    try:
        rates = {}
        for task in tasks:
            specs = [EpisodeSpec(task, state_id=i) for i in range(n_states)]
            eps = list(rollout_episodes(vec, source, specs, seed=seed))
            rates[task_by_name(task).name] = float(np.mean([e.success for e in eps]))
        return rates
    finally:
        vec.close()
