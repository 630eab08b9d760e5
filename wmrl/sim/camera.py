"""Where a world point lands in a tabletop camera's image: MuJoCo's pinhole camera, read once
from the scene, then plain numpy (``wmrl.eval.wm_fidelity`` projects the privileged state's
block positions with it).

MuJoCo's camera frame: x points image-right, y image-up, and the camera looks along -z. A world
point p in that frame is q = Rᵀ (p - o) (o the camera's position, R = ``cam_xmat``, its columns
the frame's axes in world coordinates), at depth d = -q_z. With square pixels and the vertical
field of view fovy spanning the image's H rows, the focal length in px is
f = (H / 2) / tan(fovy / 2), and the point's pixel, as (row, col) in the index coordinates of
``wm_fidelity.block_centres`` (pixel (i, j) covers [i, i + 1) x [j, j + 1), its centre
counted as (i, j)):

    col = W / 2 - 1/2 + f q_x / d,    row = H / 2 - 1/2 - f q_y / d

(image rows grow downwards: ``mujoco.Renderer`` returns the top row first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wmrl.errors import ConfigError
from wmrl.sim.tabletop import tabletop_model  # loads no MuJoCo (tabletop_model does)
from wmrl.sim.tasks import BLOCKS, CAMERAS, STATE_SLICES


@dataclass(frozen=True)
class PinholeCamera:
    position: np.ndarray  # float [3] in world coordinates
    axes: np.ndarray  # float [3, 3]: columns = the camera's x, y, z axes in world coordinates
    fovy: float  # vertical field of view, degrees
    height: int
    width: int

    def pixels(self, points: np.ndarray) -> np.ndarray:
        """(row, col) float [..., 2] of world points [..., 3] (module doc); NaN behind the
        camera."""
        q = (np.asarray(points, np.float64) - self.position) @ self.axes  # Rᵀ (p - o) per row
        depth = -q[..., 2]
        f = (self.height / 2) / np.tan(np.radians(self.fovy) / 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(depth > 0, depth, np.nan)
            return np.stack([self.height / 2 - 0.5 - f * q[..., 1] / d,
                             self.width / 2 - 0.5 + f * q[..., 0] / d], -1)


def tabletop_camera(name: str, image_size: tuple[int, int] | list[int]) -> PinholeCamera:
    """The tabletop scene's camera ``name`` (``tasks.CAMERAS``) for frames of ``image_size``
    (H, W): its pose after ``mj_forward`` and its fovy, read from the one scene
    ``tabletop.py`` renders (MuJoCo is loaded here)."""
    if name not in CAMERAS:
        raise ConfigError(f"env.camera={name!r} is not a tabletop camera: one of {list(CAMERAS)}")
    import mujoco

    model = tabletop_model()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    i = model.camera(name).id
    h, w = (int(s) for s in image_size)
    return PinholeCamera(data.cam_xpos[i].copy(), data.cam_xmat[i].reshape(3, 3).copy(),
                         float(model.cam_fovy[i]), h, w)


def block_pixels(states: np.ndarray, camera: PinholeCamera) -> np.ndarray:
    """float [..., len(BLOCKS), 2]: each block's centre (``tasks.STATE_SLICES``' ``<block>_pos``
    of privileged states [..., STATE_DIM]) as (row, col) in ``camera``'s image."""
    return np.stack([camera.pixels(states[..., STATE_SLICES[f"{b}_pos"]]) for b in BLOCKS], -2)
