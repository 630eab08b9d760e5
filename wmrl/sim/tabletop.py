"""A small MuJoCo tabletop task suite with LIBERO-style 7-D delta end-effector actions.

Scene: a table (top at z = 0), a red and a blue 5 cm block (free bodies), a green plate and a
yellow "left zone" strip painted on the table's left edge, and a floating two-finger hand.
A third-person camera looks at the table from the front, so image-left is world -x:
``front_close`` (default) frames the workspace, so the blocks and fingers are ~1.3x larger in
a 64 px image than in ``front`` (the whole table).

Hand: a free body with gravity compensation, welded (soft constraint) to a mocap target. Each
control step sets the target to the hand's *current* pose plus the scaled delta action, as an
operational-space controller does in LIBERO; because the weld is soft the hand is stopped by
the table and the blocks instead of passing through them. Fingers are slide joints driven
by position actuators, so the gripper's state is visible in the image.

Grasp ("magnet"): when the gripper command is "close" and a block's centre lies inside a
small box around the grasp point between the fingers (which are not yet fully closed), a
`connect` equality constraint pins that block's centre to the grasp point; opening the
gripper releases it and physics takes over. A friction pinch with a floating hand works,
but it is sensitive to finger forces, contact parameters and noisy commands; the magnet
makes success depend on *where* the policy puts the gripper and *when* it closes, which is
what tiny policies and world models can learn from 64x64 images. The connect constraint
fixes position only (block rotation stays free), so a grasp never snaps a block's yaw.

Actions (LIBERO convention): a[0:3] = (dx, dy, dz), a[3:6] = (droll, dpitch, dyaw), each in
[-1, 1] and scaled by ``max_pos_step`` metres / ``max_rot_step`` radians per control step;
a[6] = gripper, -1 open, +1 close (sign decides).

Tasks (language instruction -> privileged success predicate, all require "not held"):
  red_on_plate   "put the red block on the green plate":  red centre within 5.5 cm (xy)
                  of the plate centre and resting on it.
  blue_on_plate  same with the blue block.
  red_left       "push the red block to the left": the red block wholly inside the yellow
                  zone (centre x < -0.205) and on the table.
  red_of_two     "pick up the red block and put it on the plate": red_on_plate's predicate
                  in the "slots" layout (the paced-demonstrator base's task): the two blocks
                  sit in a left and a right slot (which is where is a coin flip), the plate
                  behind them, the hand above the middle, each jittered by +-1.5 cm. Every task owns its
                  initial-state distribution, as LIBERO tasks do; the others draw "random"
                  scenes (blocks, plate and hand anywhere solvable).
Success is visible in the image: the block sits on the green disc / inside the yellow strip
and the gripper is open or away.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
from typing import TYPE_CHECKING

# MuJoCo itself is imported inside the functions that build or step a scene, so importing this
# module (or wmrl.sim.tasks, whose table it shares) loads no simulator.
# The GL backend is chosen when mujoco is first imported: prefer EGL (works headless with
# Debian's libegl1 + libgl1-mesa-dri), fall back to OSMesa (libosmesa6). An explicit
# MUJOCO_GL set by the user always wins.
if "MUJOCO_GL" not in os.environ:
    if ctypes.util.find_library("EGL"):
        os.environ["MUJOCO_GL"] = "egl"
    elif ctypes.util.find_library("OSMesa"):
        os.environ["MUJOCO_GL"] = "osmesa"

import numpy as np  # noqa: E402

# the tasks, cameras and state layout live in tasks.py (no MuJoCo there), one table for both
from wmrl.sim.tasks import (  # noqa: E402, F401  (re-exported: tabletop.TASKS etc.)
    BLOCKS,
    STATE_DIM,
    STATE_SLICES,
    TASK_NAMES,
    TASKS,
    Task,
    task_by_name,
)

if TYPE_CHECKING:
    import mujoco

# Geometry (metres). The hand frame's origin is the grasp point between the fingertips.
BLOCK_HALF = 0.025
PLATE_RADIUS = 0.07
PLATE_TOP = 0.008
ZONE_EDGE_X = -0.18  # the yellow zone is x < ZONE_EDGE_X
PUSH_SUCCESS_X = ZONE_EDGE_X - BLOCK_HALF  # block centre left of this: wholly in the zone
FINGER_OPEN = 0.045  # finger inner-face distance from the grasp point when open
FINGER_CLOSED = 0.002  # a hair open, so closed fingers do not press on their joint limits
FINGER_HALF_THICK = 0.006
CAPTURE_HALF = 0.02  # magnet capture box half-size around the grasp point
WORKSPACE_LO = np.array([-0.30, -0.25, 0.02])
WORKSPACE_HI = np.array([0.30, 0.25, 0.30])
MAX_TILT = 0.5  # |roll|, |pitch| limit of the commanded hand orientation (rad)

# initial_states() rows: red x, y, yaw, blue x, y, yaw, plate x, y, hand x, y, z.
INIT_DIM = 11

_XML = f"""
<mujoco model="wmrl_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.002" integrator="implicitfast"/>
  <visual>
    <global offwidth="512" offheight="512"/>
    <quality shadowsize="0" offsamples="0"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <default>
    <geom friction="1 0.01 0.001" solref="0.005 1"/>
  </default>
  <worldbody>
    <light pos="0 -0.3 1.2" dir="0 0.2 -1" directional="true" castshadow="false"
           diffuse="0.4 0.4 0.4"/>
    <geom name="floor" type="plane" pos="0 0 -0.6" size="3 3 0.1" rgba="0.25 0.25 0.28 1"/>
    <geom name="table" type="box" pos="0 0 -0.02" size="0.34 0.30 0.02"
          rgba="0.62 0.52 0.42 1"/>
    <geom name="zone" type="box" pos="{(ZONE_EDGE_X - 0.34) / 2} 0 0.0004"
          size="{(0.34 + ZONE_EDGE_X) / 2} 0.30 0.0004" rgba="0.95 0.82 0.15 1"
          contype="0" conaffinity="0"/>
    <camera name="front" pos="0 -0.60 0.62" xyaxes="1 0 0 0 0.72 0.69" fovy="42"/>
    <camera name="front_close" pos="0.02 -0.62 0.70" xyaxes="1 0 0 0 0.72 0.69" fovy="33"/>
    <body name="plate" mocap="true" pos="0.1 0.1 0">
      <geom name="plate" type="cylinder" pos="0 0 {PLATE_TOP / 2}"
            size="{PLATE_RADIUS} {PLATE_TOP / 2}" rgba="0.15 0.72 0.22 1"/>
    </body>
    <body name="red" pos="0 0 {BLOCK_HALF}">
      <freejoint name="red"/>
      <geom name="red" type="box" size="{BLOCK_HALF} {BLOCK_HALF} {BLOCK_HALF}" mass="0.05"
            rgba="0.9 0.12 0.1 1"/>
    </body>
    <body name="blue" pos="0.1 0 {BLOCK_HALF}">
      <freejoint name="blue"/>
      <geom name="blue" type="box" size="{BLOCK_HALF} {BLOCK_HALF} {BLOCK_HALF}" mass="0.05"
            rgba="0.12 0.3 0.95 1"/>
    </body>
    <body name="hand_target" mocap="true" pos="0 0 0.2"/>
    <body name="hand" pos="0 0 0.2" gravcomp="1">
      <freejoint name="hand"/>
      <site name="grasp" size="0.004" rgba="1 1 1 0"/>
      <geom name="palm" type="box" pos="0 0 0.052" size="0.058 0.022 0.012" mass="0.3"
            rgba="0.2 0.2 0.22 1"/>
      <geom name="wrist" type="cylinder" pos="0 0 0.14" size="0.016 0.08" mass="0.05"
            rgba="0.55 0.55 0.6 1" contype="0" conaffinity="0"/>
      <body name="finger_l" pos="{-FINGER_HALF_THICK} 0 0.01" gravcomp="1">
        <joint name="finger_l" type="slide" axis="-1 0 0" range="0 {FINGER_OPEN}"
               damping="3" armature="0.01"/>
        <geom name="finger_l" type="box" size="{FINGER_HALF_THICK} 0.018 0.03" mass="0.03"
              rgba="0.85 0.85 0.88 1"/>
      </body>
      <body name="finger_r" pos="{FINGER_HALF_THICK} 0 0.01" gravcomp="1">
        <joint name="finger_r" type="slide" axis="1 0 0" range="0 {FINGER_OPEN}"
               damping="3" armature="0.01"/>
        <geom name="finger_r" type="box" size="{FINGER_HALF_THICK} 0.018 0.03" mass="0.03"
              rgba="0.85 0.85 0.88 1"/>
      </body>
    </body>
  </worldbody>
  <contact>
    <exclude body1="finger_l" body2="finger_r"/>
  </contact>
  <equality>
    <weld name="hand_track" body1="hand_target" body2="hand" solref="0.01 1"/>
    <connect name="hold_red" body1="hand" body2="red" anchor="0 0 0" active="false"
             solref="0.01 1"/>
    <connect name="hold_blue" body1="hand" body2="blue" anchor="0 0 0" active="false"
             solref="0.01 1"/>
  </equality>
  <actuator>
    <position name="finger_l" joint="finger_l" kp="300" ctrlrange="0 {FINGER_OPEN}"
              forcerange="-8 8"/>
    <position name="finger_r" joint="finger_r" kp="300" ctrlrange="0 {FINGER_OPEN}"
              forcerange="-8 8"/>
  </actuator>
</mujoco>
"""


@functools.lru_cache(maxsize=1)
def tabletop_model() -> mujoco.MjModel:
    """The compiled scene, shared read-only by every env in the process (state is in MjData)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(_XML)
    for block in BLOCKS:
        # connect eq_data = [anchor in body1 (hand) frame, anchor in body2 frame]: pin the
        # block's centre (not its qpos0-relative point) to the grasp point.
        model.eq_data[model.equality(f"hold_{block}").id, 3:6] = 0.0
    return model


def camera_names() -> tuple[str, ...]:
    """The scene's cameras (``TabletopEnv(camera=...)``), as the model defines them."""
    m = tabletop_model()
    return tuple(m.camera(i).name for i in range(m.ncam))


# "slots" layout: the plate behind, the two blocks in a left and a right slot (which block is
# where is a coin flip), the hand above the middle; every position jittered by +-SLOT_JITTER.
SLOT_X = (-0.08, 0.14)
SLOT_Y = -0.05
SLOT_PLATE = (0.03, 0.10)
SLOT_HAND = (0.03, -0.07, 0.17)
SLOT_JITTER = 0.015


def _slots_initial_state(rng: np.random.Generator) -> np.ndarray:
    def j() -> float:  # one jitter draw (draw order fixes the evaluation scenes)
        return rng.uniform(-SLOT_JITTER, SLOT_JITTER)

    xs = SLOT_X if rng.random() < 0.5 else SLOT_X[::-1]
    red = [xs[0] + j(), SLOT_Y + j(), rng.uniform(-0.3, 0.3)]
    blue = [xs[1] + j(), SLOT_Y + j(), rng.uniform(-0.3, 0.3)]
    plate = [SLOT_PLATE[0] + j(), SLOT_PLATE[1] + j()]
    hand = [SLOT_HAND[0] + j(), SLOT_HAND[1] + j(), SLOT_HAND[2] + j()]
    return np.array([*red, *blue, *plate, *hand], dtype=np.float64)


def _sample_initial_state(task: Task, rng: np.random.Generator) -> np.ndarray:
    """Rejection-sample object and hand positions that leave the task solvable
    (``layout="random"``), or draw a jittered two-slot scene (``layout="slots"``)."""
    if task.layout == "slots":
        return _slots_initial_state(rng)
    for _ in range(10_000):
        plate = np.array([rng.uniform(-0.08, 0.18), rng.uniform(-0.12, 0.14)])
        red = np.array([rng.uniform(-0.14, 0.20), rng.uniform(-0.14, 0.14)])
        blue = np.array([rng.uniform(-0.14, 0.20), rng.uniform(-0.14, 0.14)])
        if task.kind == "push":
            red[0] = rng.uniform(-0.08, 0.12)
        ok = (
            np.linalg.norm(red - blue) > 0.09
            and np.linalg.norm(red - plate) > PLATE_RADIUS + 0.05
            and np.linalg.norm(blue - plate) > PLATE_RADIUS + 0.05
        )
        if task.kind == "push":
            # keep the push lane (the block's row, from the zone to behind the block) free
            for other in (blue, plate):
                ok = ok and (abs(other[1] - red[1]) > 0.11 or other[0] > red[0] + 0.15)
        if ok:
            yaws = rng.uniform(-0.4, 0.4, size=2)
            hand = np.array(
                [rng.uniform(-0.04, 0.04), rng.uniform(-0.10, -0.04), rng.uniform(0.16, 0.2)]
            )
            return np.array([*red, yaws[0], *blue, yaws[1], *plate, *hand], dtype=np.float64)
    raise RuntimeError("could not sample an initial state")  # pragma: no cover


def initial_state(task: str | int, state_id: int, seed: int = 0) -> np.ndarray:
    """Initial state ``state_id`` of ``task``'s fixed set for ``seed`` (float64 [INIT_DIM]).

    Each state has its own RNG stream keyed by (seed, task index, state_id), so state i is the
    same whatever the size of the set it is drawn in.
    """
    t = task_by_name(task)
    if state_id < 0:
        raise ValueError(f"state_id must be >= 0, got {state_id}")
    rng = np.random.default_rng([seed, TASK_NAMES.index(t.name), state_id])
    return _sample_initial_state(t, rng)


def initial_states(task: str | int, n: int, seed: int = 0) -> np.ndarray:
    """The fixed evaluation set: float64 [n, INIT_DIM], rows = ``initial_state(task, i, seed)``."""
    return np.stack([initial_state(task, i, seed) for i in range(n)])


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def _euler_quat(rpy: np.ndarray) -> np.ndarray:
    import mujoco

    q = np.zeros(4)
    mujoco.mju_euler2Quat(q, np.asarray(rpy, dtype=np.float64), "XYZ")
    return q


def _headless_gl_fix() -> None:
    """If mujoco was imported before this module without MUJOCO_GL, it picked GLFW, which needs
    a display (and a failed GLFW attempt cannot be retried in-process): switch the classic
    renderer's context class to EGL or OSMesa before the first render."""
    from mujoco.rendering.classic import gl_context

    cls = getattr(gl_context, "GLContext", None)
    if os.environ.get("DISPLAY") or cls is None or "glfw" not in cls.__module__:
        return
    import importlib

    for backend, lib in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(lib):
            gl_context.GLContext = importlib.import_module(f"mujoco.{backend}").GLContext
            os.environ["MUJOCO_GL"] = backend
            return


def make_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    import mujoco

    _headless_gl_fix()
    try:
        return mujoco.Renderer(model, height, width)
    except Exception as err:  # GL backends fail with many exception types
        raise RuntimeError(
            f"MuJoCo offscreen rendering failed (MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}): "
            f"{err}. On Debian install `libegl1 libgl1-mesa-dri` and set MUJOCO_GL=egl, or "
            "install `libosmesa6` and set MUJOCO_GL=osmesa; or build the env with "
            "render=False to run without images."
        ) from err


class TabletopEnv:
    """One tabletop env with a gymnasium-style API (no gymnasium dependency).

    reset(seed=None, options={"task": name|instruction|index, "state_id": int}) -> (obs, info)
    step(action[7]) -> (obs, reward, terminated, truncated, info)
    step_chunk(actions[C, 7]) -> (obs, rewards[C], terminated[C], truncated[C], info)
    obs = {"image": uint8 [H, W, 3], "task": instruction str, "state": float32 [STATE_DIM]};
    info["success"] is the privileged predicate. reward = 1.0 on success frames else 0.0.
    Without "state_id" reset draws a fresh random initial state from the env's RNG.

    ``skip_intermediate_renders`` (default True; RLinf's LIBERO option of the same name):
    ``step_chunk`` runs physics, reward, success and termination on every control step but
    renders the camera only on the chunk's last step and on the step an episode ends, the
    frames an observation is built from; the returned obs, rewards, flags and states are
    bit-identical to rendering every step (rendering does not touch the physics). The
    intermediate frames are then not made, so info["frames"] is left out. ``step`` always
    renders (its observation is that step's frame): per-step callers (``rollout_episodes``:
    data collection, evaluation videos) get every frame either way.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] | list[int] = 64,
        max_episode_steps: int = 80,  # the bare simulator's; runs pass conf/task's
        control_dt: float = 0.05,
        max_pos_step: float = 0.02,
        max_rot_step: float = 0.1,
        terminate_on_success: bool = True,
        eval_seed: int = 0,
        task: str | int = "red_on_plate",
        render: bool = True,
        camera: str = "front_close",
        renderer: mujoco.Renderer | None = None,
        skip_intermediate_renders: bool = True,
    ):
        self.height, self.width = (
            (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        )
        if not (8 <= self.height <= 512 and 8 <= self.width <= 512):
            raise ValueError(f"image_size {image_size} must be within [8, 512] pixels")
        self.model = tabletop_model()
        self.n_substeps = int(round(control_dt / self.model.opt.timestep))
        if self.n_substeps < 1:
            raise ValueError(f"control_dt={control_dt} is shorter than the physics timestep")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.max_episode_steps = max_episode_steps
        self.max_pos_step = max_pos_step
        self.max_rot_step = max_rot_step
        self.terminate_on_success = terminate_on_success
        self.eval_seed = eval_seed
        self.render_images = render
        self.camera = camera
        self.skip_intermediate_renders = bool(skip_intermediate_renders)
        import mujoco

        self.data = mujoco.MjData(self.model)
        self._renderer = renderer
        self._rng = np.random.default_rng()
        self._ids()
        self.task = task_by_name(task)
        self.state_id: int | None = 0
        self.t = 0
        self._done = False
        self._apply_initial_state(initial_state(self.task.name, 0, eval_seed))

    # ---- ids -----------------------------------------------------------------------------
    def _ids(self) -> None:
        m = self.model
        self._qadr = {b: m.jnt_qposadr[m.joint(b).id] for b in (*BLOCKS, "hand")}
        self._vadr = {b: m.jnt_dofadr[m.joint(b).id] for b in (*BLOCKS, "hand")}
        self._finger_q = [m.jnt_qposadr[m.joint(f).id] for f in ("finger_l", "finger_r")]
        self._hold_eq = {b: m.equality(f"hold_{b}").id for b in BLOCKS}
        self._mocap_plate = m.body_mocapid[m.body("plate").id]
        self._mocap_hand = m.body_mocapid[m.body("hand_target").id]
        self._grasp_site = m.site("grasp").id

    # ---- state access --------------------------------------------------------------------
    def block_pos(self, block: str) -> np.ndarray:
        a = self._qadr[block]
        return self.data.qpos[a : a + 3].copy()

    def plate_pos(self) -> np.ndarray:
        return self.data.mocap_pos[self._mocap_plate].copy()

    def hand_pos(self) -> np.ndarray:
        return self.data.site_xpos[self._grasp_site].copy()

    def held_block(self) -> str | None:
        for b in BLOCKS:
            if self.data.eq_active[self._hold_eq[b]]:
                return b
        return None

    def gripper_aperture(self) -> float:
        return float(np.mean(self.data.qpos[self._finger_q]) / FINGER_OPEN)

    def set_block_pose(self, block: str, pos, yaw: float = 0.0) -> None:
        """Teleport a block (zero velocity) and recompute derived quantities."""
        a, v = self._qadr[block], self._vadr[block]
        self.data.qpos[a : a + 3] = pos
        self.data.qpos[a + 3 : a + 7] = _yaw_quat(yaw)
        self.data.qvel[v : v + 6] = 0.0
        import mujoco

        mujoco.mj_forward(self.model, self.data)

    def set_hand_pos(self, pos) -> None:
        """Teleport the hand (grasp point) and its mocap target, upright, at rest."""
        a, v = self._qadr["hand"], self._vadr["hand"]
        self.data.qpos[a : a + 3] = pos
        self.data.qpos[a + 3 : a + 7] = [1, 0, 0, 0]
        self.data.qvel[v : v + 6] = 0.0
        self.data.mocap_pos[self._mocap_hand] = pos
        self.data.mocap_quat[self._mocap_hand] = [1, 0, 0, 0]
        self._rpy_cmd = np.zeros(3)
        import mujoco

        mujoco.mj_forward(self.model, self.data)

    def state(self) -> np.ndarray:
        d = self.data
        held = self.held_block()
        s = np.concatenate(
            [
                self.hand_pos(),
                self._rpy_cmd,
                [self.gripper_aperture()],
                [-1.0 if held is None else float(BLOCKS.index(held))],
                self.block_pos("red"),
                self.block_pos("blue"),
                self.plate_pos(),
                d.qpos[self._qadr["red"] + 3 : self._qadr["red"] + 7],
                d.qpos[self._qadr["blue"] + 3 : self._qadr["blue"] + 7],
            ]
        )
        return s.astype(np.float32)

    def success(self, task: str | int | None = None) -> bool:
        """The privileged success predicate for ``task`` (default: the current task)."""
        return success_from_state(self.state(), self.task if task is None else task)

    # ---- rendering -----------------------------------------------------------------------
    def render(self) -> np.ndarray:
        if self._renderer is None:
            self._renderer = make_renderer(self.model, self.height, self.width)
        self._renderer.update_scene(self.data, self.camera)
        return self._renderer.render()

    def _obs(self, image: bool = True) -> dict:
        """The observation; ``image=False`` leaves the frame out (obs["image"] is None)."""
        if not image:
            frame = None
        elif self.render_images:
            frame = self.render()
        else:
            frame = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        return {"image": frame, "task": self.task.instruction, "state": self.state()}

    # ---- gymnasium-style API -------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        options = dict(options or {})
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if "task" in options:
            self.task = task_by_name(options["task"])
        state_id = options.get("state_id")
        if "init_state" in options:
            init = np.asarray(options["init_state"], dtype=np.float64)
            if init.shape != (INIT_DIM,):
                raise ValueError(f"options['init_state'] must have shape ({INIT_DIM},)")
        elif state_id is not None:
            init = initial_state(self.task.name, int(state_id), self.eval_seed)
        else:
            init = _sample_initial_state(self.task, self._rng)
        self._apply_initial_state(init)
        self.state_id = state_id
        self.t = 0
        self._done = False
        return self._obs(), {"success": self.success(), "state_id": state_id}

    def _apply_initial_state(self, init: np.ndarray) -> None:
        import mujoco

        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        red, blue, plate, hand = init[0:3], init[3:6], init[6:8], init[8:11]
        d.mocap_pos[self._mocap_plate] = [plate[0], plate[1], 0.0]
        for block, (x, y, yaw) in (("red", red), ("blue", blue)):
            a = self._qadr[block]
            d.qpos[a : a + 3] = [x, y, BLOCK_HALF]
            d.qpos[a + 3 : a + 7] = _yaw_quat(yaw)
        a = self._qadr["hand"]
        d.qpos[a : a + 3] = hand
        d.qpos[a + 3 : a + 7] = [1, 0, 0, 0]
        d.mocap_pos[self._mocap_hand] = hand
        d.mocap_quat[self._mocap_hand] = [1, 0, 0, 0]
        d.qpos[self._finger_q] = FINGER_OPEN
        d.ctrl[:] = FINGER_OPEN
        d.eq_active[list(self._hold_eq.values())] = 0
        self._rpy_cmd = np.zeros(3)
        mujoco.mj_forward(m, d)

    def _apply_action(self, action: np.ndarray) -> None:
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ValueError(f"action must be 7 finite floats, got shape {a.shape}: {a}")
        a = np.clip(a, -1.0, 1.0)
        d = self.data
        target = np.clip(self.hand_pos() + a[:3] * self.max_pos_step, WORKSPACE_LO, WORKSPACE_HI)
        rpy = self._rpy_cmd + a[3:6] * self.max_rot_step
        rpy[:2] = np.clip(rpy[:2], -MAX_TILT, MAX_TILT)
        rpy[2] = np.clip(rpy[2], -np.pi / 2, np.pi / 2)
        self._rpy_cmd = rpy
        close = a[6] > 0.0
        d.ctrl[:] = FINGER_CLOSED if close else FINGER_OPEN
        if not close:
            d.eq_active[list(self._hold_eq.values())] = 0
        elif self.held_block() is None:
            self._try_grasp()
        # the hand body origin coincides with the grasp site, so the mocap target is the
        # commanded grasp-point pose
        d.mocap_pos[self._mocap_hand] = target
        d.mocap_quat[self._mocap_hand] = _euler_quat(rpy)

    def _try_grasp(self) -> None:
        """Magnet grasp: pin the nearest block whose centre is inside the capture box."""
        hand = self.hand_pos()
        if self.gripper_aperture() * FINGER_OPEN < BLOCK_HALF - 0.004:
            return  # fingers already shut: nothing can be between them
        rot = self.data.site_xmat[self._grasp_site].reshape(3, 3)
        best, best_dist = None, np.inf
        for b in BLOCKS:
            rel = rot.T @ (self.block_pos(b) - hand)  # block centre in the hand frame
            if np.all(np.abs(rel) < CAPTURE_HALF) and np.linalg.norm(rel) < best_dist:
                best, best_dist = b, np.linalg.norm(rel)
        if best is not None:
            self.data.eq_active[self._hold_eq[best]] = 1

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        return self._step(action, render=True)

    def _step(self, action, render: bool) -> tuple[dict, float, bool, bool, dict]:
        """One control step; the frame is rendered when ``render`` or when the episode ends
        here (its last observation is always a real frame), else obs["image"] is None."""
        if self._done:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        import mujoco

        self._apply_action(action)
        mujoco.mj_step(self.model, self.data, nstep=self.n_substeps)
        self.t += 1
        success = self.success()
        terminated = bool(success and self.terminate_on_success)
        truncated = bool(self.t >= self.max_episode_steps and not terminated)
        self._done = terminated or truncated
        info = {"success": success, "t": self.t, "state_id": self.state_id}
        return self._obs(image=render or self._done), float(success), terminated, truncated, info

    def step_chunk(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Run a chunk of actions [C, 7]; stops early when the episode ends.

        Entries after the end are padded (reward 0, done flags repeated, last frame repeated).
        info: "frames" uint8 [C, H, W, 3] (the observation after each action; only with
        ``skip_intermediate_renders=False``, which renders every step), "success" bool [C],
        "states" float32 [C, STATE_DIM], "n_executed" int.
        """
        actions = np.asarray(actions, dtype=np.float64)
        if actions.ndim != 2 or actions.shape[1] != 7:
            raise ValueError(f"actions must have shape [C, 7], got {actions.shape}")
        c = actions.shape[0]
        rewards = np.zeros(c, np.float32)
        term, trunc, succ = np.zeros(c, bool), np.zeros(c, bool), np.zeros(c, bool)
        skip = self.skip_intermediate_renders
        frames = None if skip else np.zeros((c, self.height, self.width, 3), np.uint8)
        states = np.zeros((c, STATE_DIM), np.float32)
        n = 0
        obs = None
        for i in range(c):
            # skipping: render the last step only (_step also renders the step an episode ends)
            obs, rewards[i], term[i], trunc[i], info = self._step(
                actions[i], render=not skip or i == c - 1)
            succ[i], states[i] = info["success"], obs["state"]
            if frames is not None:
                frames[i] = obs["image"]
            n += 1
            if term[i] or trunc[i]:
                term[i + 1 :], trunc[i + 1 :] = term[i], trunc[i]
                succ[i + 1 :], states[i + 1 :] = succ[i], states[i]
                if frames is not None:
                    frames[i + 1 :] = frames[i]
                break
        info = {"success": succ, "states": states, "n_executed": n, "state_id": self.state_id}
        if frames is not None:
            info["frames"] = frames
        return obs, rewards, term, trunc, info

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def success_from_state(state: np.ndarray, task: str | int | Task) -> bool:
    """Success predicate on an ``obs["state"]`` vector (see ``STATE_SLICES``)."""
    t = task if isinstance(task, Task) else task_by_name(task)
    s = np.asarray(state, dtype=np.float64)
    held = int(round(s[STATE_SLICES["held"]][0]))
    if held == BLOCKS.index(t.block):
        return False
    pos = s[STATE_SLICES[f"{t.block}_pos"]]
    if t.kind == "place":
        plate = s[STATE_SLICES["plate_pos"]]
        on_plate_xy = np.linalg.norm(pos[:2] - plate[:2]) < PLATE_RADIUS - 0.015
        resting = PLATE_TOP + BLOCK_HALF - 0.01 < pos[2] < PLATE_TOP + BLOCK_HALF + 0.012
        return bool(on_plate_xy and resting)
    on_table = BLOCK_HALF - 0.01 < pos[2] < BLOCK_HALF + 0.012
    return bool(pos[0] < PUSH_SUCCESS_X and on_table)


def reset_each(envs: list, seed: int | list[int] | None = None,
               options: list[dict] | dict | None = None) -> list[tuple[dict, dict]]:
    """Reset each env of a vector env -> its (obs, info). ``seed``: one int (env i gets
    seed + i) or one per env; ``options``: a dict for all envs or one per env."""
    b = len(envs)
    seeds = [None] * b if seed is None else (
        [seed + i for i in range(b)] if isinstance(seed, int) else list(seed))
    opts = [options] * b if options is None or isinstance(options, dict) else list(options)
    if len(seeds) != b or len(opts) != b:
        raise ValueError(f"need {b} seeds/options, got {len(seeds)}/{len(opts)}")
    return [e.reset(seed=s, options=o) for e, s, o in zip(envs, seeds, opts)]


class TabletopVecEnv:
    """B tabletop envs stepped in a Python loop, sharing one model and one renderer.

    Batched obs: {"image": uint8 [B, H, W, 3], "task": list[str], "state": float32 [B, S]}.
    Envs whose episode ended are frozen (not stepped) until the next reset; their done flags
    and last observation are repeated. ``env_kwargs`` go to every ``TabletopEnv``, among them
    ``skip_intermediate_renders`` (default True: ``step_chunk`` renders each env's last frame
    of the chunk only and returns no info["frames"]; pass False for every frame).
    """

    def __init__(self, num_envs: int, **env_kwargs):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.num_envs = num_envs
        self.envs = [TabletopEnv(**env_kwargs) for _ in range(num_envs)]
        first = self.envs[0]
        # one GL context for all envs: they share the model, only MjData differs
        self._renderer = (
            make_renderer(first.model, first.height, first.width)
            if first.render_images
            else None
        )
        for e in self.envs:
            e._renderer = self._renderer
        self._last: list[dict] = [e._obs() for e in self.envs]
        self._done = np.zeros(num_envs, bool)
        self._last_done = [(False, False)] * num_envs

    @staticmethod
    def task_names(tasks, states_per_task: int | None = None) -> list[str]:
        """Canonical names of ``tasks`` (any number of fixed initial states per task: they
        are drawn from ``eval_seed``)."""
        return [task_by_name(t).name for t in tasks]

    def _batch(self, obs_list: list[dict]) -> dict:
        return {
            "image": np.stack([o["image"] for o in obs_list]),
            "task": [o["task"] for o in obs_list],
            "state": np.stack([o["state"] for o in obs_list]),
        }

    def reset(
        self, seed: int | list[int] | None = None, options: list[dict] | dict | None = None
    ) -> tuple[dict, dict]:
        """``seed``: one int (env i gets seed + i) or a list; ``options``: a dict for all envs
        or a list of per-env dicts (e.g. [{"task": ..., "state_id": i}, ...])."""
        b = self.num_envs
        results = reset_each(self.envs, seed, options)
        self._last = [r[0] for r in results]
        self._done[:] = False
        self._last_done = [(False, False)] * b
        info = {"success": np.array([r[1]["success"] for r in results])}
        return self._batch(self._last), info

    def step(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rew, term, trunc, info = self.step_chunk(np.asarray(actions)[:, None, :])
        return obs, rew[:, 0], term[:, 0], trunc[:, 0], {"success": info["success"][:, 0]}

    def step_chunk(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        """actions [B, C, 7] -> (obs, rewards [B, C], terminated [B, C], truncated [B, C],
        info {"frames": uint8 [B, C, H, W, 3] (only with skip_intermediate_renders=False),
        "success": bool [B, C], "states": float32 [B, C, STATE_DIM], "n_executed": int [B]})."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.ndim != 3 or actions.shape[0] != self.num_envs or actions.shape[2] != 7:
            raise ValueError(f"actions must have shape [{self.num_envs}, C, 7], got "
                             f"{actions.shape}")
        b, c = actions.shape[:2]
        e0 = self.envs[0]
        rewards = np.zeros((b, c), np.float32)
        term, trunc, succ = np.zeros((b, c), bool), np.zeros((b, c), bool), np.zeros((b, c), bool)
        frames = (None if e0.skip_intermediate_renders
                  else np.zeros((b, c, e0.height, e0.width, 3), np.uint8))
        states = np.zeros((b, c, STATE_DIM), np.float32)
        n_executed = np.zeros(b, np.int64)
        for i, env in enumerate(self.envs):
            if self._done[i]:
                if frames is not None:
                    frames[i] = self._last[i]["image"]
                states[i] = self._last[i]["state"]
                term[i], trunc[i] = self._last_done[i]
                succ[i] = env.success()
                continue
            obs, rewards[i], term[i], trunc[i], info = env.step_chunk(actions[i])
            succ[i], states[i] = info["success"], info["states"]
            if frames is not None:
                frames[i] = info["frames"]
            n_executed[i] = info["n_executed"]
            self._last[i] = obs
            self._done[i] = term[i, -1] or trunc[i, -1]
            self._last_done[i] = (bool(term[i, -1]), bool(trunc[i, -1]))
        info = {"success": succ, "states": states, "n_executed": n_executed}
        if frames is not None:
            info["frames"] = frames
        return self._batch(self._last), rewards, term, trunc, info

    @property
    def done(self) -> np.ndarray:
        return self._done.copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        for e in self.envs:
            e._renderer = None


def initial_frames(
    task: str | int, n: int, seed: int = 0, image_size: int | tuple[int, int] = 64, **env_kwargs
) -> tuple[np.ndarray, list[str]]:
    """First observations of the fixed initial states 0..n-1 of ``task`` (eval seed ``seed``):
    (frames uint8 [n, H, W, 3], instructions list[str] of length n). Frame i is exactly what
    ``TabletopEnv(eval_seed=seed).reset(options={"task": task, "state_id": i})`` shows, so a
    world-model env started from frame i and the simulator evaluated on state i agree."""
    env = TabletopEnv(image_size=image_size, eval_seed=seed, task=task, **env_kwargs)
    try:
        frames = np.stack(
            [env.reset(options={"task": task, "state_id": i})[0]["image"] for i in range(n)]
        )
    finally:
        env.close()
    return frames, [env.task.instruction] * n
