"""The tabletop camera's pinhole projection: hand-checkable points on a made-up camera, and the
projected block centre on MuJoCo's own rendering of the scene (the colour rule's centre)."""

import numpy as np
import pytest

from wmrl.errors import ConfigError
from wmrl.eval.wm_fidelity import block_centres
from wmrl.sim.camera import PinholeCamera, block_pixels, tabletop_camera
from wmrl.sim.tabletop import BLOCK_HALF, TabletopEnv
from wmrl.sim.tasks import BLOCKS, STATE_DIM, STATE_SLICES


def test_pinhole_on_a_camera_looking_down_minus_z():
    """fovy 90°: f = (H / 2) / tan 45° = H / 2, so a point 1 m ahead and 1 m up lands on the
    top edge (row -1/2), one on the axis on the image's centre, (H - 1) / 2."""
    cam = PinholeCamera(np.zeros(3), np.eye(3), 90.0, 8, 12)
    px = cam.pixels(np.array([[0, 0, -1], [0, 1, -1], [0.5, 0, -2], [0, 0, 1]], float))
    np.testing.assert_allclose(px[:3], [[3.5, 5.5], [-0.5, 5.5],
                                        [3.5, 5.5 + 4 * 0.5 / 2]])  # f = 4 px
    assert np.isnan(px[3]).all()  # behind the camera


@pytest.mark.parametrize("name", ["front_close", "front"])
def test_projected_block_centre_is_on_the_rendered_block(name):
    """Blocks set at three places on the table, rendered by MuJoCo at 64 px: the projected
    state position is within 0.5 px (0.3 measured; a fovy 10% off misses by up to 2.7) of the
    centre of the block's pixels (the colour rule)."""
    env = TabletopEnv(image_size=64, task="red_of_two", camera=name)
    env.reset(options={"state_id": 0})
    env.set_hand_pos([0.0, 0.2, 0.28])  # up at the back: it hides no block
    cam = tabletop_camera(name, (64, 64))
    for red, blue in (((-0.15, -0.12), (0.15, 0.1)), ((0.0, 0.0), (-0.1, 0.12)),
                      ((0.2, -0.05), (-0.2, -0.05))):
        env.set_block_pose("red", [*red, BLOCK_HALF], yaw=0.3)
        env.set_block_pose("blue", [*blue, BLOCK_HALF])
        frame, state = env.render(), env.state()
        projected = block_pixels(state, cam)
        assert projected.shape == (len(BLOCKS), 2)
        for k, b in enumerate(BLOCKS):
            centre, present = block_centres(frame, b)
            assert present, (name, b, red, blue)
            assert np.linalg.norm(centre - projected[k]) < 0.5, (name, b, centre, projected[k])
    env.close()


def test_block_pixels_reads_the_state_layout_and_bad_names_are_refused():
    cam = PinholeCamera(np.zeros(3), np.eye(3), 90.0, 8, 8)
    states = np.zeros((2, STATE_DIM), np.float32)
    states[:, STATE_SLICES["red_pos"]] = [0, 0, -1]
    states[1, STATE_SLICES["blue_pos"]] = [1, 0, -1]
    px = block_pixels(states, cam)
    assert px.shape == (2, 2, 2)
    np.testing.assert_allclose(px[1], [[3.5, 3.5], [3.5, 7.5]])
    assert np.isnan(px[0, 1]).all()  # blue at the camera's centre: no depth
    with pytest.raises(ConfigError, match="env.camera='side'"):
        tabletop_camera("side", (64, 64))
