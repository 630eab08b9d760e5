"""Import RLinf's WoVR world model into a directory ``ActionWanModel.from_pretrained`` reads.

    python scripts/import_rlinf.py --dit RLinf-Wan-LIBERO-Spatial/model-00001.safetensors \
        --vae RLinf-Wan-LIBERO-Spatial/Wan2.2_VAE.pth --dataset RLinf-Wan-LIBERO-Spatial/dataset \
        --out assets/wovr_spatial

writes ``<out>/transformer/`` (diffusers ``WanTransformer3DModel``, sharded safetensors),
``<out>/action/`` (the fork's action modules; ``num_text_tokens: 0``: the fork's action-only
cross-attention context), with ``--vae`` ``<out>/vae/`` (diffusers ``AutoencoderKLWan`` from
the original Wan2.2 ``.pth``, loaded weights-only) and with ``--dataset`` ``<out>/initial_states/``
(the reset data, KIR context for every state, in the order RLinf's reader takes the files).
The logic is ``wmrl.pipeline.rlinf`` (``release.import_release``, one module per artifact); the
release's format is described in docs/reference/rlinf_wovr_release.md. Prints one JSON line
(configs, counts).

Every input is checked before anything is converted, and ``--out`` is written whole or not at
all; an ``--out`` holding anything but an earlier import is refused before any work
(``--force`` replaces it); a refusal is one line on stderr (at most 300 characters; ``WMRL_FULL_ERROR=1`` raises the
whole error) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from wmrl.errors import one_line
from wmrl.pipeline.rlinf.release import REFUSALS, import_release


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dit", nargs="+", required=True,
                   help="the release's DiT: model-00001.safetensors (or all its shards)")
    p.add_argument("--vae", default=None, help="the release's Wan2.2_VAE.pth")
    p.add_argument("--dataset", default=None,
                   help="the release's dataset/ (traj*.npy, traj*_kir.npy): reset states")
    p.add_argument("--no-kir", action="store_true",
                   help="leave out *_kir* files (RLinf's enable_kir: false)")
    p.add_argument("--out", required=True, help="the world-model directory to write (new, "
                   "empty or an earlier import)")
    p.add_argument("--force", action="store_true",
                   help="replace --out even if it holds other files (they are deleted)")
    p.add_argument("--num-heads", type=int, default=None,
                   help="attention heads (default: dim / 128, as every published Wan DiT)")
    p.add_argument("--text-dim", type=int, default=None,
                   help="text_dim of the (unused, zero) text embedder (default 4096)")
    p.add_argument("--shard-gb", type=float, default=2.0, help="output shard size in GiB")
    a = p.parse_args(argv)
    try:
        info = import_release(a.dit, a.out, vae=a.vae, dataset=a.dataset, kir=not a.no_kir,
                              num_heads=a.num_heads, text_dim=a.text_dim,
                              shard_gb=a.shard_gb, force=a.force)
    except REFUSALS as err:
        if os.environ.get("WMRL_FULL_ERROR") == "1":
            raise
        print(f"import_rlinf: {one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
