"""The whole release imported (``scripts/import_rlinf.py``, the full-size check's ``import``
part): the DiT, with the VAE and the reset data when given, into one world-model directory
``ActionWanModel.from_pretrained`` reads, written whole or not at all."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence

from wmrl.io.atomic import atomic_dir, check_output_dir
from wmrl.pipeline.rlinf.common import ImportRefused
from wmrl.pipeline.rlinf.dit import read_dit, write_dit
from wmrl.pipeline.rlinf.reset_data import read_reset_data, write_reset_data
from wmrl.pipeline.rlinf.vae import read_vae, write_vae

WRITER = "import_rlinf"  # the output folder's marker (wmrl.io.atomic)
# what a bad input or output folder raises (ConfigError is a ValueError): a refusal, not a bug
REFUSALS = (ImportRefused, OSError, ValueError, RuntimeError, pickle.UnpicklingError)


def import_release(dit: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   vae: str | os.PathLike | None = None,
                   dataset: str | os.PathLike | None = None, kir: bool = True,
                   num_heads: int | None = None, text_dim: int | None = None,
                   shard_gb: float = 2.0, force: bool = False) -> dict:
    """Check every input first (the DiT's headers, the VAE's key table through the
    weights-only unpickler, every dataset file through the restricted one), then write the
    whole output into a temporary directory that becomes ``out`` only when every part is
    written: a refusal or a crash leaves ``out`` as it was. An ``out`` holding anything but
    an earlier import is refused first (``--out`` named), unless ``force``. ``kir`` False
    leaves out the ``*_kir*`` files (RLinf's ``enable_kir: false``). Returns what was
    written (configs, counts; ``initial_states``: its final path)."""
    out = check_output_dir(out, WRITER, force)
    dit = read_dit(dit, num_heads=num_heads, text_dim=text_dim)
    vae = read_vae(vae) if vae else None
    reset = read_reset_data(dataset, enable_kir=kir) if dataset else None
    shard = int(shard_gb * (1 << 30))
    with atomic_dir(out, WRITER) as tmp:
        info = write_dit(dit, tmp, shard_bytes=shard)
        if vae is not None:
            info.update(write_vae(vae, tmp, shard_bytes=shard))
        if reset is not None:
            info.update(write_reset_data(reset, tmp))
    if reset is not None:  # the path it has now
        info["initial_states"] = str(out / "initial_states")
    return info
