"""Reading the release's .npy files without running any pickled code but numpy's own."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from wmrl.pipeline.rlinf.common import (
    ImportRefused,
)

# A .npy of per-frame dicts is a pickle; only numpy's own array / dtype / scalar reconstruction
# is allowed to run while reading it (no other global can be named by the file).
_NPY_GLOBALS = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
                for n in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _NPY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array part: refused")


def load_npy(path: Path) -> np.ndarray:
    """``np.load`` for object arrays without unpickling anything but numpy arrays and scalars
    (dicts, lists, strings, numbers are plain pickle values)."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read(f)
        except ValueError as err:
            raise ImportRefused(f"{path}: not a .npy file ({err})") from None
        if not dtype.hasobject:
            return np.load(path, allow_pickle=False)
        try:
            arr = _NumpyOnlyUnpickler(f).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
            raise ImportRefused(f"{path}: {err}") from None
    if not isinstance(arr, np.ndarray) or arr.shape != shape:
        raise ImportRefused(f"{path}: the pickled payload is not the {shape} array its header "
                            "announces")
    return arr
