"""B ``LiberoEnv``s behind ``TabletopVecEnv``'s interface: what ``evaluate_policy`` (through
``rollout_episodes``: ``envs``, each env's reset/step) and ``LiberoSimEnv`` (``reset``,
``step_chunk``) drive. Each env owns its robosuite env and GL context; they step in a Python
loop. Needs the optional extra (``make libero``).
"""

from __future__ import annotations

import numpy as np

from wmrl.errors import ConfigError
from wmrl.sim.libero_adapter import LiberoEnv
from wmrl.sim.tabletop import reset_each


class LiberoVecEnv:
    """Batched obs: {"image": uint8 [B, H, W, 3], "task": list[str], "state": float32 [B, 8]}.
    Envs whose episode ended are frozen until the next reset (their done flags, success and
    last observation repeated), as in ``TabletopVecEnv``. ``env_kwargs`` go to every
    ``LiberoEnv`` (suite, image_size, max_episode_steps, num_wait_steps, ...)."""

    def __init__(self, num_envs: int, **env_kwargs):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self.envs = [LiberoEnv(**env_kwargs) for _ in range(num_envs)]
        self._last: list[dict | None] = [None] * num_envs
        self._done = np.zeros(num_envs, bool)
        self._last_done = np.zeros((num_envs, 3), bool)  # terminated, truncated, success

    def task_names(self, tasks, states_per_task: int | None = None) -> list[str]:
        """Canonical names (``"<suite>/<id>"``) of ``tasks``; a suite's name alone stands for all
        its tasks. With ``states_per_task``, a task with fewer fixed initial states is
        refused (before any episode runs)."""
        env, names = self.envs[0], []
        suites = env.benchmark.get_benchmark_dict()
        for task in tasks:
            if isinstance(task, str) and task in suites:
                n = env._suite(task).get_num_tasks()
                names += [f"{task}/{i}" for i in range(n)]
            else:
                try:
                    names.append(env.task_name(task))
                except ValueError as err:
                    raise ConfigError(f"tasks: {err}") from err
        for name in names if states_per_task is not None else []:
            n = env.num_states(name)
            if states_per_task > n:
                raise ConfigError(f"episodes_per_task={states_per_task} is not allowed: {name} "
                                  f"has {n} fixed initial states")
        return names

    def _batch(self, obs_list: list[dict]) -> dict:
        return {"image": np.stack([o["image"] for o in obs_list]),
                "task": [o["task"] for o in obs_list],
                "state": np.stack([o["state"] for o in obs_list])}

    def reset(self, seed: int | list[int] | None = None,
              options: list[dict] | dict | None = None) -> tuple[dict, dict]:
        """``seed``: one int (env i gets seed + i) or a list; ``options``: a dict for all envs
        or one per env ({"task": ..., "state_id": i})."""
        results = reset_each(self.envs, seed, options)
        self._last = [r[0] for r in results]
        self._done[:] = False
        self._last_done[:] = False
        return self._batch(self._last), {"success": np.array([r[1]["success"] for r in results])}

    def step(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rew, term, trunc, info = self.step_chunk(np.asarray(actions)[:, None, :])
        return obs, rew[:, 0], term[:, 0], trunc[:, 0], {"success": info["success"][:, 0]}

    def step_chunk(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        """actions [B, C, 7] -> (obs, rewards [B, C], terminated [B, C], truncated [B, C],
        info {"success": bool [B, C], "n_executed": int [B], and "frames" uint8
        [B, C, H, W, 3] when intermediate renders are not skipped})."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.ndim != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != 7:
            raise ValueError(f"actions must have shape [{self.num_envs}, C, 7], got "
                             f"{actions.shape}")
        if any(o is None for o in self._last):
            raise RuntimeError("call reset() before step_chunk()")
        b, c = actions.shape[:2]
        rewards = np.zeros((b, c), np.float32)
        term, trunc, succ = (np.zeros((b, c), bool) for _ in range(3))
        frames: list[np.ndarray | None] = [None] * b
        n_executed = np.zeros(b, np.int64)
        for i, env in enumerate(self.envs):
            if self._done[i]:
                term[i], trunc[i], succ[i] = self._last_done[i]
                if not env.skip_intermediate_renders:
                    frames[i] = np.repeat(self._last[i]["image"][None], c, 0)
                continue
            obs, rewards[i], term[i], trunc[i], info = env.step_chunk(actions[i])
            succ[i], n_executed[i] = info["success"], info["n_executed"]
            frames[i] = info.get("frames")  # None while intermediate renders are skipped
            self._last[i] = obs
            self._done[i] = term[i, -1] or trunc[i, -1]
            self._last_done[i] = term[i, -1], trunc[i, -1], succ[i, -1]
        info = {"success": succ, "n_executed": n_executed}
        if all(f is not None for f in frames):
            info["frames"] = np.stack(frames)
        return self._batch(self._last), rewards, term, trunc, info

    @property
    def done(self) -> np.ndarray:
        return self._done.copy()

    def close(self) -> None:
        for e in self.envs:
            e.close()
