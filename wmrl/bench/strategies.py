"""Hybrid shard (2 x 2 mesh) vs full shard (1 x 4) step time on 4 CPU gloo processes for a small
transformer, and offload+onload seconds per GB. Uses the ``strategies`` package directly (no
Trainer) so only the sharding layout differs between the two runs."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

WORLD, STEPS, WARMUP = 4, 6, 2


def _model(layers: int) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)


def _worker(rank: int, port: int, shard_size: int, out: str, world: int, steps: int,
            warmup: int, layers: int) -> None:
    import torch.distributed as dist

    from strategies.sharding import apply_fully_shard, build_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = _model(layers)
    mesh = build_mesh("cpu", world, shard_size)
    apply_fully_shard(model, mesh, (nn.TransformerEncoderLayer,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64, generator=torch.Generator().manual_seed(rank))
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        dist.barrier()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(str(sorted(times)[len(times) // 2]))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _step_time(shard_size: int, world: int, steps: int, warmup: int, layers: int) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t")
        mp.spawn(_worker, args=(_free_port(), shard_size, out, world, steps, warmup, layers),
                 nprocs=world, join=True)
        return float(Path(out).read_text())


def _offload_s_per_gb(features: int = 4096) -> dict:
    from strategies import offload, onload

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Linear(features, features).to(device)  # 4096: 64 MiB of fp32 weights
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, features, device=device)).sum().backward()
    opt.step()
    down = offload(model, opt, pin_memory=device != "cpu")
    up = onload(model, opt)
    seconds = down.seconds + up.seconds
    note = "cuda<->host" if device == "cuda" else "no accelerator: moves are no-ops (bookkeeping only)"
    return {"name": "strategies.offload_onload_s_per_gb", "value": seconds / (down.bytes / 1e9),
            "unit": "s/GB", "bytes": down.bytes, "device": device, "note": note}


def run(world: int = WORLD, steps: int = STEPS, warmup: int = WARMUP, layers: int = 4,
        offload_features: int = 4096) -> list[dict]:
    """``world`` gloo processes (even): hybrid shard on a (2, world / 2) mesh, full shard on
    (1, world); the median of ``steps`` timed steps after ``warmup``; offload of a square
    Linear of ``offload_features`` (+ Adam state)."""
    size = {"world": world, "steps": steps, "warmup": warmup, "layers": layers}
    hybrid, full = _step_time(world // 2, **size), _step_time(world, **size)
    ctx = {"processes": world, "backend": "gloo", "model": f"{layers}-layer transformer d=64"}
    return [
        {"name": "strategies.hybrid_shard_step_s", "value": hybrid, "unit": "s",
         "mesh": f"2x{world // 2}", **ctx},
        {"name": "strategies.full_shard_step_s", "value": full, "unit": "s",
         "mesh": f"1x{world}", **ctx},
        _offload_s_per_gb(offload_features),
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
