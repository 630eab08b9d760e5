"""Weight sync bandwidth: a ~1 GiB state dict (fp32 + bf16) from this process to 2 Ray
rollout actors, against single-process memcpy measured in the same run.

Figures (GB/s = model bytes / wall time until every actor has applied the sync):
memcpy into a pre-touched buffer (warm) and into a fresh allocation (alloc), the naive
``ray.put`` of a dict of torch tensors + ``load_state_dict``-style copy (on a 256 MiB slice
to keep the run short), the bucketed object-store sync (median of interleaved repeats), its
ratio to memcpy - with actors that copy into their parameters and with zero-copy actors
whose parameters alias the shared-memory buckets - the gloo transport (a broadcast over the
trainer's SyncGroup with the actors, beside the object store), and a sparse delta sync
(0.1 % of elements changed).
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from wmrl.rollout.weight_sync.receiver import WeightReceiver
from wmrl.rollout.weight_sync.sender import WeightSender, push_weights

GIB = 2**30


def make_state_dict(total_bytes: int = GIB) -> dict[str, torch.Tensor]:
    """60 fp32 tensors of 16 MiB + bf16 tensors of 4 MiB for the rest (a 7B-like mix)."""
    sd: dict[str, torch.Tensor] = {}
    n_fp32 = min(60, total_bytes // (16 * 2**20))
    for i in range(n_fp32):
        sd[f"layers.{i}.weight"] = torch.randn(4 * 2**20)
    rest = total_bytes - n_fp32 * 16 * 2**20
    for i in range(rest // (4 * 2**20)):
        sd[f"norms.{i}.weight"] = torch.randn(2 * 2**20).to(torch.bfloat16)
    return sd


def module_from_spec(spec: list[tuple[str, tuple[int, ...], torch.dtype]]) -> torch.nn.Module:
    """An nn.Module whose parameters have these dotted names, pre-touched (filled with 0)."""
    root = torch.nn.Module()
    for name, shape, dtype in spec:
        *path, attr = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        t = torch.empty(shape, dtype=dtype).fill_(0)
        mod.register_parameter(attr, torch.nn.Parameter(t, requires_grad=False))
    return root


class SyncTarget:
    """A rollout actor holding a module with the same names/shapes/dtypes."""

    def __init__(self, spec: list[tuple[str, tuple[int, ...], torch.dtype]], zero_copy: bool):
        torch.set_num_threads(1)
        self.module = module_from_spec(spec)
        self.rx = WeightReceiver(self.module, zero_copy=zero_copy)
        self.sd = self.rx.targets

    def apply_weights(self, payload) -> int:
        return self.rx.apply(payload)

    def join(self, host: str, port: int, rank: int, size: int) -> int:
        from wmrl.rollout.sync_group import SyncGroup

        self.rx.group = SyncGroup(host, port, rank, size)
        return rank

    def load_naive(self, ref_holder) -> int:
        import ray

        state = ray.get(ref_holder[0])  # dict of torch tensors, deserialised by pickle
        for k, v in state.items():
            self.sd[k].copy_(v)
        return len(state)

    def checksum(self, names: list[str]) -> float:
        sd = self.module.state_dict()
        return float(sum(sd[n].float().sum() for n in names))


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(total_bytes: int = GIB, repeats: int = 5, bucket_mb: float = 64.0) -> list[dict]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=3 * GIB)
    try:
        return _run(ray, total_bytes, repeats, bucket_mb)
    finally:
        if started:
            ray.shutdown()


def _run(ray, total_bytes: int, repeats: int, bucket_mb: float) -> list[dict]:
    sd = make_state_dict(total_bytes)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    spec = [(k, tuple(v.shape), v.dtype) for k, v in sd.items()]
    Target = ray.remote(num_cpus=0)(SyncTarget)
    flat = torch.cat([t.view(-1).view(torch.uint8) for t in sd.values()])
    dst = torch.empty_like(flat).fill_(0)
    memcpy, alloc, sync = [], [], {False: [], True: []}
    names = list(sd)[:3]
    want = float(sum(sd[n].float().sum() for n in names))
    version = 0
    for zero_copy in (True, False):  # the copying actors stay for the naive and delta runs
        actors = [Target.remote(spec, zero_copy) for _ in range(2)]
        sender = WeightSender(bucket_mb=bucket_mb)
        version += 1
        push_weights(sender, sd, version, actors)  # warm-up: first touch of store pages
        for _ in range(repeats):  # interleaved: drifting machine load hits both
            memcpy.append(_time(lambda: dst.copy_(flat)))
            alloc.append(_time(lambda: flat.clone()))
            version += 1
            sync[zero_copy].append(_time(
                lambda v=version, s=sender, a=actors: push_weights(s, sd, v, a)))
        got = ray.get([a.checksum.remote(names) for a in actors])
        if any(abs(g - want) > 1e-3 * (1 + abs(want)) for g in got):
            raise RuntimeError(f"weight sync bench: actors hold {got}, trainer {want}")
        if not zero_copy:
            break
        for a in actors:
            ray.kill(a)

    # naive: one ray.put of a dict of torch tensors (slice of the model), copy in the actor
    naive_sd = dict(list(sd.items())[:16])
    naive_bytes = sum(t.numel() * t.element_size() for t in naive_sd.values())

    def naive():
        ref = ray.put(naive_sd)
        ray.get([a.load_naive.remote([ref]) for a in actors])

    naive()
    naive_s = statistics.median(_time(naive) for _ in range(2))

    # gloo: the same actors join a SyncGroup with this process (what transport=gloo builds)
    from wmrl.rollout.sync_group import SyncGroup, free_port

    host, port = "127.0.0.1", free_port()
    joined = [a.join.remote(host, port, i + 1, 1 + len(actors)) for i, a in enumerate(actors)]
    gsender = WeightSender(bucket_mb=bucket_mb, transport="gloo")
    gsender.use_group(SyncGroup(host, port, 0, 1 + len(actors)))
    ray.get(joined)
    gloo = []
    for _ in range(max(2, repeats // 2)):
        version += 1
        gloo.append(_time(lambda v=version: push_weights(gsender, sd, v, actors)))
    got = ray.get([a.checksum.remote(names) for a in actors])
    if any(abs(g - want) > 1e-3 * (1 + abs(want)) for g in got):
        raise RuntimeError(f"weight sync bench (gloo): actors hold {got}, trainer {want}")

    # delta: 0.1 % of the elements changed since the last sync
    dsender = WeightSender(bucket_mb=bucket_mb, delta=True)
    version += 1
    push_weights(dsender, sd, version, actors)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in sd.values():
            idx = torch.randint(0, t.numel(), (max(1, t.numel() // 1000),), generator=g)
            t.view(-1)[idx] += 1
    version += 1
    t0 = time.perf_counter()
    payload = dsender.prepare(sd, version)
    delta_prepare_s = time.perf_counter() - t0
    assert ray.get([a.apply_weights.remote(payload) for a in actors]) == [version] * 2
    delta_s = time.perf_counter() - t0
    delta_bytes = sum(d.indices.nbytes + d.values.nbytes for d in ray.get(payload.buckets))
    del payload
    for a in actors:
        ray.kill(a)

    gbs = nbytes / 1e9
    mem, fresh = (gbs / statistics.median(x) for x in (memcpy, alloc))
    copy_gbs, alias_gbs = (gbs / statistics.median(sync[z]) for z in (False, True))
    ctx = {"bytes": nbytes, "actors": 2, "bucket_mb": bucket_mb, "repeats": repeats,
           "threads": os.environ.get("OMP_NUM_THREADS", "default")}
    rows = [
        {"name": "weight_sync.memcpy_gbps", "value": round(mem, 3), "unit": "GB/s",
         "what": f"{nbytes / GIB:.3g} GiB copy into a pre-touched buffer", **ctx},
        {"name": "weight_sync.memcpy_alloc_gbps", "value": round(fresh, 3), "unit": "GB/s",
         "what": f"{nbytes / GIB:.3g} GiB clone (copy into a fresh allocation)", **ctx},
        {"name": "weight_sync.naive_ray_put_gbps",
         "value": round(naive_bytes / 1e9 / naive_s, 3), "unit": "GB/s",
         "what": "ray.put(dict of torch tensors) -> 2 actors copy_", "naive_bytes": naive_bytes},
    ]
    for label, gb, z in (("bucketed", copy_gbs, False), ("bucketed_zero_copy", alias_gbs, True)):
        rows += [
            {"name": f"weight_sync.{label}_gbps", "value": round(gb, 3), "unit": "GB/s",
             "what": "WeightSender cpu transport -> 2 actors applied (median)",
             "zero_copy": z, "seconds": [round(t, 3) for t in sync[z]], **ctx},
            {"name": f"weight_sync.{label}_over_memcpy", "value": round(gb / mem, 3),
             "unit": "ratio", "over_alloc_memcpy": round(gb / fresh, 3), **ctx},
        ]
    gloo_gbs = gbs / statistics.median(gloo)
    rows += [
        {"name": "weight_sync.gloo_gbps", "value": round(gloo_gbs, 3), "unit": "GB/s",
         "what": "WeightSender gloo transport over a SyncGroup -> 2 actors applied (median)",
         "seconds": [round(t, 3) for t in gloo], **ctx},
        {"name": "weight_sync.gloo_over_memcpy", "value": round(gloo_gbs / mem, 3),
         "unit": "ratio", "over_object_store": round(gloo_gbs / copy_gbs, 3), **ctx},
    ]
    return rows + [
        {"name": "weight_sync.delta_0.1pct_s", "value": round(delta_s, 3), "unit": "s",
         "what": "delta sync, 0.1% of elements changed", "prepare_s": round(delta_prepare_s, 3),
         "sent_bytes": delta_bytes, **ctx},
    ]


if __name__ == "__main__":
    import json

    for row in run():
        print(json.dumps(row))
