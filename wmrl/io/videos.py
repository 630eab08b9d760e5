"""Videos out of wmrl: frames side by side and animated GIFs (the sim eval's, the imagined vs
real comparisons, the world-model fine-tune's validation)."""

from __future__ import annotations

import numpy as np

from wmrl.io.atomic import atomic_path


def side_by_side_video(imagined: np.ndarray, real: np.ndarray, gap: int = 2) -> np.ndarray:
    """uint8 [T, H, 2W + gap, 3]: imagined left, real right, a white gap between; the shorter
    holds its last frame."""
    t = max(len(imagined), len(real))

    def hold(v: np.ndarray) -> np.ndarray:
        return np.concatenate([v, np.repeat(v[-1:], t - len(v), 0)]) if len(v) < t else v

    a, b = hold(imagined), hold(real)
    white = np.full((t, a.shape[1], gap, 3), 255, np.uint8)
    return np.concatenate([a, white, b], axis=2)


def save_gif(frames: np.ndarray, path: str, fps: int = 10, scale: int = 2) -> str:
    """uint8 [T, H, W, 3] -> animated GIF (Pillow), written atomically."""
    from PIL import Image

    imgs = [Image.fromarray(f).resize((f.shape[1] * scale, f.shape[0] * scale), Image.NEAREST)
            for f in np.asarray(frames, dtype=np.uint8)]
    with atomic_path(path) as tmp:
        imgs[0].save(tmp, format="GIF", save_all=True, append_images=imgs[1:],
                     duration=int(1000 / fps), loop=0)
    return path
