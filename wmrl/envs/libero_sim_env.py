"""LIBERO itself behind the rollout-env contract (``env=libero_sim``): the oracle of
``experiment=sim_oracle`` on a LIBERO task, GRPO scored by LIBERO's own success predicate.

Contract and reset draws as ``TabletopSimEnv`` (``wmrl.envs.sim_env``): consecutive envs in a
group share one of the task's ``num_states`` fixed initial states (LIBERO has 50 per task),
drawn by ``group_state_ids`` from the seed; ``chunk_step`` steps a ``LiberoVecEnv`` with
``skip_intermediate_renders`` (default True: each env renders the chunk's last frame only,
the observation the policy sees). Needs the optional extra (``make libero``).
"""

from __future__ import annotations

from typing import Any

from wmrl.envs.sim_env import SimEnv, check_sizes
from wmrl.sim.libero_vec import LiberoVecEnv


class LiberoSimEnv(SimEnv):
    def __init__(
        self,
        num_envs: int,
        group_size: int = 1,
        chunk: int = 8,
        max_episode_steps: int = 224,  # libero_spatial's 220-step limit in chunks of 8, not
                                       # the tabletop task's (conf/task)
        task: str = "libero_spatial/0",
        num_states: int = 50,
        seed: int = 0,
        reward: Any = None,
        skip_intermediate_renders: bool = True,
        **env_kwargs,
    ):
        """``task``: ``"<suite>/<id or task name>"``; ``env_kwargs`` go to every ``LiberoEnv``
        (image_size, num_wait_steps, ...)."""
        check_sizes("LiberoSimEnv", num_envs, group_size, chunk, max_episode_steps, reward)
        env_kwargs.setdefault("suite", str(task).rpartition("/")[0] or "libero_spatial")
        vec = LiberoVecEnv(num_envs, task=task, max_episode_steps=max_episode_steps,
                           terminate_on_success=True,
                           skip_intermediate_renders=skip_intermediate_renders, **env_kwargs)
        name = vec.envs[0].task_name(task)  # "<suite>/<id>"
        available = vec.envs[0].num_states(name)
        if not 1 <= num_states <= available:
            vec.close()
            raise ValueError(f"num_states={num_states} must be in [1, {available}]: {name} has "
                             f"{available} fixed initial states")
        super().__init__(vec, group_size, chunk, name, num_states, seed)
