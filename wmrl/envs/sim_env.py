"""The MuJoCo tabletop simulator behind the rollout-env contract of ``WanWorldModelEnv``.

GRPO normally runs inside the world model; this env runs it against the simulator itself,
with the privileged success predicate as the reward. It is the *oracle*: what the same
policy, optimizer and step budget reach when the imagined frames and the reward are
perfect. The gap between an oracle run and a world-model run is what world-model fidelity
and reward precision cost (``experiment=sim_oracle``; docs/results.md).

Contract (as ``WanWorldModelEnv``): ``reset(seed, state_ids)`` -> obs {"image": uint8
[B, H, W, 3], "task": list[str]}; ``chunk_step(actions [B, C, 7])`` -> (obs, rewards [B, C],
terminations [B, C], truncations [B, C], info {"success": bool [B]}). Consecutive envs in a
group share an initial state; state ids are drawn exactly as ``WanWorldModelEnv`` draws them
(same seed -> same scenes), so an oracle run and a world-model run see the same groups.

``skip_intermediate_renders`` (default True) renders each env's camera only on the chunk's
last control step (and the step its episode ends); physics, rewards, success and the done
flags still run every step. The contract returns only the observation after the chunk, so
what the policy sees is bit-identical to rendering every step, for ~chunk-fold fewer renders.

``SimEnv`` is the contract over any vector simulator with ``TabletopVecEnv``'s interface;
``TabletopSimEnv`` and ``LiberoSimEnv`` (``wmrl.envs.libero_sim_env``) build theirs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from wmrl.envs.initial_states import group_state_ids, seed_reset_generator
from wmrl.sim.tabletop import TabletopVecEnv


def check_sizes(owner: str, num_envs: int, group_size: int, chunk: int,
                max_episode_steps: int, reward: Any) -> None:
    """The checks every simulator env makes before it builds anything."""
    if num_envs < 1 or group_size < 1 or num_envs % group_size:
        raise ValueError(f"num_envs ({num_envs}) must be a positive multiple of group_size "
                         f"({group_size})")
    if reward is not None:
        raise ValueError(f"{owner} scores episodes with the simulator's success "
                         "predicate: set env.reward=null (experiment=sim_oracle "
                         "does)")
    if max_episode_steps % chunk:
        raise ValueError(f"max_episode_steps ({max_episode_steps}) must be a multiple of "
                         f"chunk ({chunk})")


class SimEnv:
    """The rollout-env contract over a vector simulator ``vec`` with TabletopVecEnv's
    ``reset(options=[...])`` / ``step_chunk`` / ``close``: groups of ``group_size`` envs
    reset to one of ``num_states`` fixed initial states of ``task``."""

    def __init__(self, vec, group_size: int, chunk: int, task: str, num_states: int,
                 seed: int = 0):
        self.vec, self.num_envs = vec, vec.num_envs
        self.group_size, self.chunk = group_size, chunk
        self.task, self.num_states = task, num_states
        self._reset_rng = torch.Generator()
        seed_reset_generator(self._reset_rng, seed)
        self._success = np.zeros(self.num_envs, bool)
        self._has_reset = False

    def _obs(self, batch: dict) -> dict:
        return {"image": torch.from_numpy(np.ascontiguousarray(batch["image"])),
                "task": list(batch["task"])}

    def reset(self, seed: int | None = None, state_ids=None) -> dict:
        if seed is not None:
            seed_reset_generator(self._reset_rng, seed)
        ids = group_state_ids(state_ids, self.num_envs // self.group_size, self.group_size,
                              self.num_states, self._reset_rng).tolist()
        obs, _ = self.vec.reset(options=[{"task": self.task, "state_id": i} for i in ids])
        self._success[:] = False
        self._has_reset = True
        return self._obs(obs)

    def chunk_step(self, actions):
        if not self._has_reset:
            raise RuntimeError("call reset() before chunk_step()")
        a = actions.detach().cpu().numpy() if torch.is_tensor(actions) else np.asarray(actions)
        if a.shape != (self.num_envs, self.chunk, 7):
            raise ValueError(f"actions must be [num_envs, chunk, 7] = "
                             f"{(self.num_envs, self.chunk, 7)}, got {a.shape}")
        obs, rewards, terms, truncs, info = self.vec.step_chunk(a)
        self._success |= info["success"].any(1)
        return (self._obs(obs), torch.from_numpy(rewards), torch.from_numpy(terms),
                torch.from_numpy(truncs), {"success": torch.from_numpy(self._success.copy())})

    def close(self) -> None:
        self.vec.close()


class TabletopSimEnv(SimEnv):
    def __init__(
        self,
        num_envs: int,
        group_size: int = 1,
        chunk: int = 8,
        max_episode_steps: int = 64,  # the tabletop task's (task.max_episode_steps)
        task: str = "red_on_plate",
        num_states: int = 256,
        seed: int = 0,
        reward: Any = None,
        skip_intermediate_renders: bool = True,
        **env_kwargs,
    ):
        check_sizes("TabletopSimEnv", num_envs, group_size, chunk, max_episode_steps, reward)
        vec = TabletopVecEnv(num_envs, max_episode_steps=max_episode_steps,
                             terminate_on_success=True,
                             skip_intermediate_renders=skip_intermediate_renders, **env_kwargs)
        super().__init__(vec, group_size, chunk, task, num_states, seed)
