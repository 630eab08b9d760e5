"""The RLinf DiT importer's peak memory at the 5B's width: a release-layout checkpoint with
dim 3072, ffn 14336, 48 channels, bf16 and 3 of the 30 blocks (~1.2 GB), imported in a child
process per output shard size; the child's peak RSS (VmHWM) beside its baseline (the same
imports, no work). Streaming means the peak grows with the shard, not with the file."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from wmrl.pipeline.rlinf.dit import release_dit_shapes

ROOT = Path(__file__).resolve().parents[2]
DIM, FFN, LAYERS = 3072, 14336, 3  # the 5B's width (release_dit_shapes' defaults), 3 blocks

# the child's own peak (wmrl.measure.peak_memory: VmHWM, which execve resets)
CHILD = """
import json, sys
from wmrl.measure.peak_memory import host_peak
from wmrl.pipeline.rlinf.dit import import_dit
if sys.argv[1] != "baseline":
    import_dit([sys.argv[2]], sys.argv[3], shard_bytes=int(sys.argv[1]))
print(json.dumps({"peak_rss_bytes": host_peak()}))
"""


def _child(args: list[str]) -> int:
    # cwd: ``-c`` puts it first on sys.path, so the child imports this checkout's wmrl
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_bytes"]


def run(layers: int = LAYERS, dim: int = DIM, ffn: int = FFN,
        shards_mib: tuple[int, ...] = (256, 2048)) -> list[dict]:
    """A checkpoint of ``layers`` blocks at width ``dim`` / ``ffn``, imported once per output
    shard size in ``shards_mib``."""
    gb = 1 << 30
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "model-00001.safetensors"
        g = torch.Generator().manual_seed(0)
        shapes = release_dit_shapes(dim=dim, ffn=ffn, layers=layers)
        save_file({k: torch.randn(s, generator=g).to(torch.bfloat16)
                   for k, s in shapes.items()}, str(src))
        file_bytes = src.stat().st_size
        base = _child(["baseline", str(src), tmp])
        rows = [{"name": "rlinf_import.baseline_rss_gb", "value": round(base / gb, 3),
                 "unit": "GiB"}]
        for mib in shards_mib:
            shard = mib << 20
            peak = _child([str(shard), str(src), str(Path(tmp) / f"out{shard}")])
            rows.append({"name": f"rlinf_import.peak_over_baseline_gb.shard_{mib}mib",
                         "value": round((peak - base) / gb, 3), "unit": "GiB",
                         "file_gb": round(file_bytes / gb, 3), "layers": layers, "dim": dim,
                         "ffn": ffn})
    return rows
