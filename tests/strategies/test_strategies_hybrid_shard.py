"""HybridShardStrategy on 4 CPU processes (real gloo groups) simulating 2 nodes x 2 devices:
mesh [[0, 1], [2, 3]]. One start of 4 processes runs every multi-process check; a
single-process reference (same data, same init) runs in the test process."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
from torch import nn

N_SAMPLES, PER_RANK, WORLD, LR, CLIP = 48, 4, 4, 0.05, 0.5  # 48 / (4 * 4) = 3 steps per epoch


class Block(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N_SAMPLES, 4, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def make_net(seed: int) -> Net:
    torch.manual_seed(seed)
    return Net()


def reference(batches):
    """Single process on the same batches (``batches[step][rank]`` = sample indices): loss = mean
    over ranks of each rank's batch MSE, global-norm clipping, Adam."""
    x, y = make_data()
    net = make_net(0)
    opt = torch.optim.Adam(net.parameters(), lr=LR)
    losses, norms = [], []
    for step_batches in batches:
        per_rank = [nn.functional.mse_loss(net(x[i]), y[i]) for i in step_batches]
        loss = torch.stack(per_rank).mean()
        opt.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)))
        opt.step()
        losses.append(float(loss.detach()))
    return losses, norms, {k: v.detach().clone() for k, v in net.state_dict().items()}


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD),
        NODE_RANK=str(rank // 2), LOCAL_RANK=str(rank % 2), OMP_NUM_THREADS="1",
    )
    torch.set_num_threads(1)
    import lightning.pytorch as pl
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from strategies import HybridShardStrategy, offload, onload

    class OffloadBetweenBatches(pl.Callback):
        """The trainer's state leaves the device after each batch and returns before the next
        (as for a loop whose batches another role makes on the same device)."""

        def on_train_batch_start(self, trainer, module, *args) -> None:
            onload(module, trainer.optimizers[0])

        def on_train_batch_end(self, trainer, module, *args) -> None:
            offload(module, trainer.optimizers[0])

        def on_train_start(self, trainer, module) -> None:
            offload(module, trainer.optimizers[0])

    class Module(pl.LightningModule):
        def __init__(self, seed: int) -> None:
            super().__init__()
            self.net = make_net(seed)
            self.losses, self.norms, self.ar_calls, self.seen = [], [], [], []

        def training_step(self, batch, _):
            x, y, idx = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.losses.append(float(loss.detach()))
            self.seen.append(idx.tolist())
            return loss

        def on_before_backward(self, loss):
            self._ar_before = calls[0]

        def on_after_backward(self):
            self.ar_calls.append(calls[0] - self._ar_before)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            norm = self.trainer.strategy.last_grad_norm  # None before the first optimizer step
            self.norms.append(None if norm is None else float(norm))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=LR)

    calls = [0]
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(*a, **kw):
        calls[0] += 1
        return real_all_reduce(*a, **kw)

    dist.all_reduce = counting_all_reduce

    def trainer(max_steps, per_rank=PER_RANK, accumulate=1, callbacks=(), **strategy_kw):
        strategy = HybridShardStrategy(
            wrap_classes=["test_strategies_hybrid_shard.Block"], param_dtype=None,
            reduce_dtype=None, gradient_clip_norm=CLIP, **strategy_kw,
        )
        t = pl.Trainer(
            accelerator="cpu", devices=2, num_nodes=2, strategy=strategy, max_steps=max_steps,
            accumulate_grad_batches=accumulate, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=list(callbacks),
            use_distributed_sampler=False,
        )
        data = TensorDataset(*make_data(), torch.arange(N_SAMPLES))
        sampler = DistributedSampler(data, num_replicas=WORLD, rank=rank, shuffle=False)
        loader = DataLoader(data, batch_size=per_rank, sampler=sampler)
        return t, loader

    res = {}
    out = Path(out_dir)
    # A: 3 steps, ranks start from different weights; sync_module_states gives rank 0's
    t, loader = trainer(3, sync_module_states=True)
    mod = Module(seed=0 if rank == 0 else 100 + rank)
    t.fit(mod, loader)
    mesh = t.strategy.device_mesh
    res["mesh"] = mesh.mesh.tolist()
    res["sampler_kwargs"] = t.strategy.distributed_sampler_kwargs
    res["losses_a"], res["seen_a"] = mod.losses, mod.seen
    res["norms_a"] = [float(n) for n in mod.norms]
    res["local_w"] = mod.net.blocks[0].fc.weight.to_local().tolist()
    res["full_a"] = {k: v.full_tensor().tolist() for k, v in mod.net.state_dict().items()}
    t.save_checkpoint(out / "sharded.ckpt")
    t.strategy._save_distributed_checkpoint = False
    t.save_checkpoint(out / "full.ckpt")
    t.strategy._save_distributed_checkpoint = True
    # offload/onload round trip on FSDP2 shards and Adam state
    opt = t.optimizers[0]
    before = [p.to_local().clone() for p in mod.parameters()]
    state_before = [v.to_local().clone() for s in opt.state.values() for k, v in s.items() if k != "step"]
    down = offload(mod, opt)
    up = onload(mod, opt)
    res["offload_bytes"], res["onload_bytes"] = down.bytes, up.bytes
    res["roundtrip_exact"] = all(torch.equal(a, p.to_local()) for a, p in zip(before, mod.parameters()))
    state_after = [v.to_local() for s in opt.state.values() for k, v in s.items() if k != "step"]
    res["state_exact"] = all(torch.equal(a, b) for a, b in zip(state_before, state_after))
    res["state_bytes"] = sum(v.numel() * 4 for v in state_before)
    # B: resume from the sharded checkpoint to step 5, with phase offloading in the loop
    t, loader = trainer(5, callbacks=[OffloadBetweenBatches()], sync_module_states=False)
    mod = Module(seed=200 + rank)  # wrong weights on purpose: the checkpoint must overwrite them
    t.fit(mod, loader, ckpt_path=str(out / "sharded.ckpt"))
    res["losses_b"], res["seen_b"] = mod.losses, mod.seen
    res["full_b"] = {k: v.full_tensor().tolist() for k, v in mod.net.state_dict().items()}
    # C: one step with 2 micro-batches of 2: the first must not all-reduce across nodes
    t, loader = trainer(1, per_rank=2, accumulate=2, sync_module_states=True)
    mod = Module(seed=0)
    t.fit(mod, loader)
    res["ar_calls_c"], res["seen_c"] = mod.ar_calls, mod.seen
    res["full_c"] = {k: v.full_tensor().tolist() for k, v in mod.net.state_dict().items()}
    (out / f"rank{rank}.json").write_text(json.dumps(res))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """The 4 processes are forked from this one with Lightning already imported: 4 spawned
    interpreters would each import torch and Lightning again (~10 s of CPU apiece, on 2
    cores). Each sets its own thread count, environment and process group."""
    import lightning.pytorch  # noqa: F401  imported once, here; the forks inherit it
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("hsdp")
    mp.start_processes(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True,
                       start_method="fork")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)], out


def _close(a, b, tol=1e-5):
    return torch.allclose(torch.tensor(a), torch.tensor(b), atol=tol, rtol=tol)


@pytest.mark.slow
def test_hybrid_shard_four_cpu_processes(spawned):
    res, out = spawned
    batches = [[r["seen_a"][s] for r in res] for s in range(3)]
    batches += [[r["seen_b"][s] for r in res] for s in range(2)]
    assert all(len(set(sum(b, []))) == WORLD * PER_RANK for b in batches)  # disjoint per rank
    ref_losses, ref_norms, ref_state = reference(batches)
    assert res[0]["mesh"] == [[0, 1], [2, 3]]
    assert [r["sampler_kwargs"] for r in res] == [{"num_replicas": 4, "rank": i} for i in range(4)]
    # shards differ inside a node and agree across nodes (the weight is 8x8: 4 rows per shard)
    w = [r["local_w"] for r in res]
    assert len(w[0]) == 4 and w[0] == w[2] and w[1] == w[3] and w[0] != w[1]
    # loss: the mean over ranks of each rank's loss equals the single-process loss
    for key, steps in (("losses_a", range(3)), ("losses_b", range(3, 5))):
        got = [sum(r[key][i] for r in res) / WORLD for i in range(len(steps))]
        assert _close(got, [ref_losses[s] for s in steps]), (key, got, ref_losses)
    # the clipping norm is the global norm (identical on all ranks) and equals the reference
    for r in res:
        assert _close(r["norms_a"], ref_norms[:3]), (r["norms_a"], ref_norms)
    assert min(ref_norms[:3]) > CLIP  # clipping was active
    # weights: after 3 steps (A) and after resume to 5 steps (B)
    _, _, ref3 = reference(batches[:3])
    for k, v in ref3.items():
        assert _close(res[0]["full_a"][k], v.tolist()), k
    for k, v in ref_state.items():
        assert all(_close(r["full_b"][k], v.tolist()) for r in res), k
    # full (single-file) checkpoint written by rank 0 holds the full weights
    full = torch.load(out / "full.ckpt", weights_only=True)
    for k, v in ref3.items():
        assert _close(full["state_dict"][f"net.{k}"].tolist(), v.tolist()), k
    assert (out / "sharded.ckpt" / "meta.pt").is_file()
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
def test_offload_roundtrip_and_accumulation(spawned):
    res, _ = spawned
    for r in res:
        assert r["roundtrip_exact"] and r["state_exact"]
        # Adam: exp_avg + exp_avg_sq of the local shards -> 2x the parameter bytes
        assert r["state_bytes"] > 0 and r["offload_bytes"] == r["onload_bytes"]
    # accumulation: the non-final micro-batch does no all-reduce, the final one does
    for r in res:
        assert r["ar_calls_c"][0] == 0 and r["ar_calls_c"][1] > 0, r["ar_calls_c"]
    # one step with 2 x 2 micro-batches equals the reference's first step on 4 samples per rank
    _, _, ref1 = reference([[r["seen_c"][0] + r["seen_c"][1] for r in res]])
    for k, v in ref1.items():
        assert _close(res[0]["full_c"][k], v.tolist()), k
