"""Weight sync: layout, bit-exact full and delta syncs (bf16 included), versions, failures,
real Ray actors through the object store, and a real gloo group through the collective path."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest
import torch
from torch import nn

from wmrl.rollout.weight_sync import codec
from wmrl.rollout.weight_sync.receiver import WeightReceiver
from wmrl.rollout.weight_sync.sender import WeightSender, push_weights
from wmrl.rollout.weight_sync.types import DeltaBucket, WeightLayout, WeightSyncError


class TinyPolicy(nn.Module):
    """fp32 + bf16 parameters and an int64 + bool buffer: every path of the bit views."""

    def __init__(self, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2).to(torch.bfloat16)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        self.register_buffer("steps", torch.tensor([seed, 7], dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([seed % 2 == 0, True]))

    def forward(self, x):
        return self.head(torch.relu(self.fc(x)).bfloat16()).float()


def same_bits(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8))
        if a[k].dtype != torch.bool else torch.equal(a[k], b[k]) for k in a
    )


def inline_sync(sender, src: nn.Module, version: int, rx: WeightReceiver) -> int:
    return rx.apply(sender.prepare(src.state_dict(), version))


def test_layout_groups_by_dtype_and_splits_at_bucket_size():
    sd = {
        "a": torch.zeros(2, 3),  # 24 bytes fills a 24-byte bucket
        "b": torch.zeros(4, dtype=torch.bfloat16),
        "c": torch.zeros(5),  # 24 + 20 > 24 -> new fp32 bucket
        "d": torch.zeros(1, dtype=torch.bfloat16),  # joins b: 10 bytes <= 24
    }
    lay = WeightLayout.build(sd, bucket_mb=24 / 2**20)
    assert [(s.name, s.bucket, s.offset, s.numel) for s in lay.slots] == [
        ("a", 0, 0, 6), ("b", 1, 0, 4), ("c", 2, 0, 5), ("d", 1, 4, 1)
    ]
    assert lay.bucket_dtypes == ("float32", "bfloat16", "float32")
    assert lay.bucket_numels == (6, 5, 5)
    assert lay.nbytes == 6 * 4 + 5 * 2 + 5 * 4
    with pytest.raises(ValueError, match="bucket_mb"):
        WeightLayout.build(sd, bucket_mb=0)


def test_full_sync_is_bit_exact_and_flips_version():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    rx = WeightReceiver(dst)
    assert rx.version == -1
    sender = WeightSender(bucket_mb=1e-4, use_object_store=False)  # ~100 B: several buckets
    payload = sender.prepare(src.state_dict(), 3)
    assert payload.layout.num_buckets >= 3 and payload.kinds == ("full",) * len(payload.kinds)
    assert rx.apply(payload) == 3 and rx.version == 3
    assert same_bits(src.state_dict(), dst.state_dict())
    x = torch.randn(2, 4)
    assert torch.equal(src(x), dst(x))


def test_delta_sends_only_changed_elements_bit_exact():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    sender = WeightSender(bucket_mb=1.0, delta=True, use_object_store=False)
    rx = WeightReceiver(dst)
    first = sender.prepare(src.state_dict(), 1)
    assert not first.is_delta  # nothing sent before: full
    rx.apply(first)
    with torch.no_grad():
        src.fc.weight[1, 2] = float("nan")
        src.fc.bias[0] = -0.0 if src.fc.bias[0] != 0 else 1.0  # -0.0 != 0.0 in bits
        src.head.weight[0, 0] += 1
    p = sender.prepare(src.state_dict(), 2)
    assert p.base_version == 1
    # fp32 bucket = fc.weight (12) + fc.bias (3): two changes at flat positions 6 and 12
    fp32 = p.layout.bucket_dtypes.index("float32")
    assert p.kinds[fp32] == "delta"
    assert p.buckets[fp32].indices.tolist() == [6, 12]
    assert rx.apply(p) == 2
    assert same_bits(src.state_dict(), dst.state_dict())
    # a dense change falls back to full for that bucket, still one version step
    with torch.no_grad():
        src.fc.weight.add_(1)
    p3 = sender.prepare(src.state_dict(), 3)
    assert p3.kinds[fp32] == "full" and isinstance(p3.buckets[fp32], np.ndarray)
    assert p3.kinds[1 - fp32] == "delta" and p3.buckets[1 - fp32].indices.size == 0
    assert rx.apply(p3) == 3 and same_bits(src.state_dict(), dst.state_dict())


def test_receiver_follows_module_tensors_replaced_by_to():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    rx = WeightReceiver(dst)
    dst.fc.weight.data = dst.fc.weight.data.clone()  # what module.to(other device) does
    rx.apply(WeightSender(use_object_store=False).prepare(src.state_dict(), 1))
    assert torch.equal(dst.fc.weight, src.fc.weight)


def test_delta_scan_across_chunks_and_tensors(monkeypatch):
    monkeypatch.setattr(codec, "SCAN_CHUNK", 4)  # a 10-element tensor spans 3 scan chunks
    src = {"a": torch.arange(10.0), "b": torch.arange(7.0)}
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    sender, rx = WeightSender(delta=True, use_object_store=False), WeightReceiver(dst)
    rx.apply(sender.prepare(src, 1))
    src["a"][[3, 4]] = -1.0
    src["b"][[0, 6]] = -2.0
    p = sender.prepare(src, 2)
    assert p.kinds == ("delta",) and p.buckets[0].indices.tolist() == [3, 4, 10, 16]
    assert p.buckets[0].values.view("float32").tolist() == [-1, -1, -2, -2]
    rx.apply(p)
    assert same_bits(src, dst)
    old, new = torch.tensor([1, 2, 3, 4]), torch.tensor([1, 5, 3, 6])
    assert codec.changed(new, old, None).tolist() == [1, 3]  # the device (torch) branch


def test_delta_on_wrong_base_and_stale_versions_raise():
    src = TinyPolicy(1)
    sender = WeightSender(delta=True, use_object_store=False)
    a, b = WeightReceiver(TinyPolicy(2)), WeightReceiver(TinyPolicy(3))
    inline_sync(sender, src, 1, a)
    with torch.no_grad():
        src.fc.bias[0] += 1
    delta = sender.prepare(src.state_dict(), 2)
    assert delta.is_delta
    with pytest.raises(WeightSyncError, match="applies on v1 but this worker has v-1"):
        b.apply(delta)
    assert b.version == -1
    a.apply(delta)
    with pytest.raises(WeightSyncError, match="stale sync v1"):
        a.apply(WeightSender(use_object_store=False).prepare(src.state_dict(), 1))
    sender.reset()
    assert not sender.prepare(src.state_dict(), 3).is_delta


def test_partial_or_mismatched_sync_raises_before_touching_weights():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    rx = WeightReceiver(dst, version=0)
    payload = WeightSender(bucket_mb=1e-4, use_object_store=False).prepare(src.state_dict(), 1)
    payload.buckets = payload.buckets[:-1]
    with pytest.raises(WeightSyncError, match="partial sync v1"):
        rx.apply(payload)
    payload = WeightSender(bucket_mb=1e-4, use_object_store=False).prepare(src.state_dict(), 1)
    payload.buckets[-1] = DeltaBucket(payload.buckets[0][0][:1].astype("int32"),
                                      payload.buckets[0][0][:1])
    with pytest.raises(WeightSyncError, match="does not match the layout"):
        rx.apply(payload)
    assert rx.version == 0 and same_bits(before, dst.state_dict())
    other = nn.Linear(4, 3)
    with pytest.raises(WeightSyncError, match=r"missing \['bias', 'weight'\]"):
        WeightReceiver(other).apply(payload)
    wide = {"fc.weight": torch.zeros(3, 5)}
    with pytest.raises(WeightSyncError, match=r"fc.weight: sync sends float32\[3, 4\]"):
        WeightReceiver(wide).apply(WeightSender(use_object_store=False).prepare(
            {"fc.weight": src.fc.weight}, 1))


def test_sync_failing_half_way_marks_weights_partial_until_a_full_sync(monkeypatch):
    src, dst = TinyPolicy(1), TinyPolicy(2)
    rx = WeightReceiver(dst, version=0)
    sender = WeightSender(delta=True, use_object_store=False)
    copy, calls = WeightReceiver._copy, []

    def flaky_copy(self, slot, bits):  # the 2nd tensor write fails (e.g. device OOM)
        calls.append(slot.name)
        if len(calls) == 2:
            raise RuntimeError("copy failed")
        copy(self, slot, bits)

    monkeypatch.setattr(WeightReceiver, "_copy", flaky_copy)
    with pytest.raises(RuntimeError, match="copy failed"):
        rx.apply(sender.prepare(src.state_dict(), 1))
    with pytest.raises(WeightSyncError, match="weights are partial"):
        _ = rx.version
    with pytest.raises(WeightSyncError, match="partial weights"):  # a delta cannot repair it
        rx.apply(sender.prepare(src.state_dict(), 2))
    sender.reset()
    assert rx.apply(sender.prepare(src.state_dict(), 3)) == 3
    assert same_bits(src.state_dict(), dst.state_dict())


def test_reading_holds_a_sync_until_the_sample_is_done():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    rx = WeightReceiver(dst, version=0)
    payload = WeightSender(use_object_store=False).prepare(src.state_dict(), 1)
    with rx.reading() as version:
        sync = threading.Thread(target=rx.apply, args=(payload,))
        sync.start()
        sync.join(0.3)
        assert sync.is_alive() and version == rx.version == 0
        assert same_bits(before, dst.state_dict())
    sync.join()
    assert rx.version == 1 and same_bits(src.state_dict(), dst.state_dict())


def test_zero_copy_never_aliases_writable_inline_arrays():
    src, dst = TinyPolicy(1), TinyPolicy(2)
    rx = WeightReceiver(dst, zero_copy=True)
    rx.apply(WeightSender(use_object_store=False).prepare(src.state_dict(), 1))
    assert rx.aliased == set() and same_bits(src.state_dict(), dst.state_dict())
    with pytest.raises(TypeError, match="needs the nn.Module"):
        WeightReceiver(dst.state_dict(), zero_copy=True)


def test_device_transport_without_accelerator_fails_clearly():
    if torch.accelerator.current_accelerator() is not None:
        pytest.skip("an accelerator is present")
    with pytest.raises(WeightSyncError, match="transport='device' needs an accelerator"):
        WeightSender(transport="device")
    with pytest.raises(ValueError, match="weight_sync.transport"):
        WeightSender(transport="nccl")


class RolloutWorker:
    """What a rollout actor does with weights: apply syncs, report the version per sample."""

    def __init__(self, seed: int, rank: int | None = None, world: int = 0, port: int = 0,
                 zero_copy: bool = False):
        torch.set_num_threads(1)
        self.group = None
        if rank is not None:
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                    rank=rank, world_size=world)
        self.model = TinyPolicy(seed)
        self.rx = WeightReceiver(self.model, zero_copy=zero_copy)
        self.fc_weight = self.model.fc.weight  # the Parameter object must survive syncs

    def apply_weights(self, payload) -> int:
        return self.rx.apply(payload)

    def version(self) -> int:
        return self.rx.version

    def sample(self, x):
        with self.rx.reading() as version:
            return version, self.model(x)

    def state(self):
        return {k: v.clone() for k, v in self.model.state_dict().items()}

    def aliased(self):
        assert self.model.fc.weight is self.fc_weight
        return sorted(self.rx.aliased)


class Trainer:
    """A trainer rank in the gloo group (rank 0): sends its weights as the sync source."""

    def __init__(self, port: int, world: int, delta: bool):
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=0, world_size=world)
        self.model = TinyPolicy(1)
        self.sender = WeightSender(bucket_mb=1e-4, delta=delta, transport="gloo")

    def prepare(self, version: int):
        return self.sender.prepare(self.model.state_dict(), version)

    def send(self, payload) -> bool:
        self.sender.send(payload)
        return True

    def reset(self):
        self.sender.reset()

    def perturb(self):
        with torch.no_grad():
            self.model.fc.weight[0, 1] += 1
            self.model.head.bias[1] = float("nan")

    def state(self):
        return {k: v.clone() for k, v in self.model.state_dict().items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def group(ray_local):
    """A trainer (rank 0) and two rollout workers - one copying, one zero-copy - in one gloo
    group, started once: every Ray test here syncs them (a worker process takes seconds to
    start), each from the next version up (``next_version``), so any order works."""
    ray = ray_local
    port = free_port()
    trainer = ray.remote(num_cpus=0)(Trainer).remote(port, 3, delta=True)
    Worker = ray.remote(num_cpus=0)(RolloutWorker)
    workers = [Worker.remote(20 + i, rank=i + 1, world=3, port=port, zero_copy=i == 1)
               for i in range(2)]
    yield trainer, workers
    for actor in [trainer, *workers]:
        ray.kill(actor)


def next_version(workers) -> int:
    import ray

    return max(ray.get([w.version.remote() for w in workers])) + 1


@pytest.mark.slow
def test_ray_actors_receive_versions_through_the_object_store(ray_local, group):
    ray = ray_local
    _, workers = group
    v = next_version(workers)
    src = TinyPolicy(1)
    x = torch.randn(3, 4)
    sender = WeightSender(bucket_mb=1e-4, delta=True)
    assert push_weights(sender, src.state_dict(), v, workers) == [v, v]
    for version, y in ray.get([w.sample.remote(x) for w in workers]):
        assert version == v and torch.equal(y, src(x))
    with torch.no_grad():
        src.fc.bias[2] = 5.0
    assert push_weights(sender, src.state_dict(), v + 1, workers) == [v + 1, v + 1]
    for state in ray.get([w.state.remote() for w in workers]):
        assert same_bits(state, src.state_dict())
    # a worker that missed a sync (as a restarted one, it lacks the delta's base) cannot
    # take a delta: the push fails and the sender falls back to full
    with torch.no_grad():
        src.fc.bias[2] = 6.0
    assert push_weights(sender, src.state_dict(), v + 2, workers[:1]) == [v + 2]
    with torch.no_grad():
        src.fc.bias[2] = 7.0
    with pytest.raises(WeightSyncError, match=f"applies on v{v + 2} but this worker has "
                                              f"v{v + 1}"):
        push_weights(sender, src.state_dict(), v + 3, workers)
    assert push_weights(sender, src.state_dict(), v + 3, workers) == [v + 3, v + 3]
    assert [ver for ver, _ in ray.get([w.sample.remote(x) for w in workers])] == [v + 3] * 2
    for state in ray.get([w.state.remote() for w in workers]):
        assert same_bits(state, src.state_dict())


@pytest.mark.slow
def test_zero_copy_workers_alias_the_store_and_stay_exact(ray_local, group):
    ray = ray_local
    _, workers = group  # copying, zero-copy
    v = next_version(workers)
    src, x = TinyPolicy(1), torch.randn(3, 4)
    sender = WeightSender(bucket_mb=1e-4, delta=True)
    push_weights(sender, src.state_dict(), v, workers)  # full: every tensor a store view
    names = sorted(src.state_dict())
    assert ray.get([w.aliased.remote() for w in workers]) == [[], names]
    with torch.no_grad():
        src.fc.bias[1] = -3.0  # delta: only fc.bias gets a private copy
    push_weights(sender, src.state_dict(), v + 1, workers)
    rest = [n for n in names if n != "fc.bias"]
    assert ray.get([w.aliased.remote() for w in workers]) == [[], rest]
    for (version, y), state in zip(ray.get([w.sample.remote(x) for w in workers]),
                                   ray.get([w.state.remote() for w in workers])):
        assert version == v + 1 and torch.equal(y, src(x)) and same_bits(state, src.state_dict())


@pytest.mark.slow
def test_gloo_collective_broadcasts_bit_exact(ray_local, group):
    """Trainer (rank 0) + 2 rollout workers in one gloo group: full, then delta (into the
    zero-copy worker's store views too: it takes private copies)."""
    ray = ray_local
    trainer, workers = group
    v = next_version(workers)
    ray.get(trainer.reset.remote())  # its first sync is full
    for version in (v, v + 1):
        payload = ray.get(trainer.prepare.remote(version))
        assert payload.buckets is None and payload.is_delta == (version == v + 1)
        applied = [w.apply_weights.remote(payload) for w in workers]
        assert ray.get(trainer.send.remote(payload))
        assert ray.get(applied) == [version, version]
        want = ray.get(trainer.state.remote())
        for state in ray.get([w.state.remote() for w in workers]):
            assert same_bits(state, want)
        ray.get(trainer.perturb.remote())
    # a worker that rejects a sync still drains the broadcasts: the trainer does not hang
    stale = ray.get(trainer.prepare.remote(v))
    applied = [w.apply_weights.remote(stale) for w in workers]
    assert ray.get(trainer.send.remote(stale), timeout=60)
    for ref in applied:
        with pytest.raises(ray.exceptions.RayTaskError, match=f"stale sync v{v}:"):
            ray.get(ref, timeout=60)
    ray.get(trainer.reset.remote())
    payload = ray.get(trainer.prepare.remote(v + 2))
    applied = [w.apply_weights.remote(payload) for w in workers]
    assert ray.get(trainer.send.remote(payload), timeout=60)
    assert ray.get(applied, timeout=60) == [v + 2, v + 2]
    want = ray.get(trainer.state.remote())
    assert all(same_bits(st, want) for st in ray.get([w.state.remote() for w in workers]))
    assert ray.get(workers[1].aliased.remote()) == []  # the collective wrote private copies


def test_float32_master_weights_reach_bf16_actors_rounded():
    """``rollout.policy_dtype=bfloat16`` beside float32 master weights: the actors build the
    policy in bf16 and every sync sends the trainer's float32 weights rounded to bf16
    (``RolloutDataModule._for_actors``), which their receiver takes as its own dtype."""
    from types import SimpleNamespace

    from wmrl.policies.openvla_oft import build_policy
    from wmrl.rollout.datamodule import RolloutDataModule

    trainer = build_policy()  # float32: the master weights
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(1e-3 * torch.randn_like(p))  # trained away from the actor's build
    actor = build_policy(dtype="bfloat16")
    sent = RolloutDataModule._for_actors(SimpleNamespace(policy_dtype=torch.bfloat16),
                                         trainer.state_dict())
    rx = WeightReceiver(actor)
    assert rx.apply(WeightSender(use_object_store=False).prepare(sent, 3)) == 3
    want = {k: v.to(torch.bfloat16) if v.is_floating_point() else v
            for k, v in trainer.state_dict().items()}
    assert same_bits(actor.state_dict(), want)
    # without the cast the actor refuses the float32 payload by name, before writing
    with pytest.raises(WeightSyncError, match="sync sends float32"):
        rx.apply(WeightSender(use_object_store=False).prepare(trainer.state_dict(), 4))
