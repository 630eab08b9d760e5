"""GRPO across data-parallel ranks is exact: R ranks holding batches B_1..B_R make the update
one rank makes on B_1 + ... + B_R (issue 17), and gradients are clipped in one place.

The real ``GRPOModule.update`` runs under a real Lightning ``Trainer`` on 2 CPU processes
(gloo): FSDP2 and HSDP through ``strategies.HybridShardStrategy`` and plain DDP, so the
gradient averaging is the strategies' own collective. The module steps with SGD(lr=1) here, so the
parameter change is minus the (clipped) gradient; it is compared with one process running the
same module on the union batch.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import time

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

GROUP, K, C, D, S = 2, 3, 2, 2, 2  # group size, chunks, steps per chunk, action dim, image
AGGREGATIONS = ("traj-mean", "token-mean", "seq-mean-token-sum")
# per rank, the outcome of each group: "mixed" is kept, "fail"/"success" are filtered out
SCENARIOS = {
    "uneven": (["mixed", "fail"], ["mixed", "success", "mixed", "mixed"]),  # keep 1 vs 3
    "empty": (["fail", "success"], ["mixed", "mixed"]),  # rank 0 keeps no group
}
NO_CLIP, CLIP = 1e6, 1e-3  # CLIP is far below the gradient norm: clipping is active


def make_batch(groups: list[str], seed: int, c: int = C, d: int = D, s: int = S) -> dict:
    """A rollout batch in the engine's layout, with episodes of 1..K chunks (of ``c`` steps of
    ``d``-dim actions, ``s``-pixel images)."""
    C, D, S = c, d, s  # the module's defaults, overridden
    g = torch.Generator().manual_seed(seed)
    n, steps = GROUP * len(groups), K * C
    success = torch.zeros(n, dtype=torch.bool)
    for i, kind in enumerate(groups):
        outcome = {"mixed": [True, False], "fail": [False, False], "success": [True, True]}[kind]
        success[GROUP * i: GROUP * (i + 1)] = torch.tensor(outcome)
    rewards = 0.1 * torch.rand(n, steps, generator=g)  # graded returns: varied advantages
    dones = torch.zeros(n, steps, dtype=torch.bool)
    for i in success.nonzero().squeeze(1).tolist():
        t = C * int(torch.randint(K, (), generator=g)) + C - 1  # done at a chunk's last step
        dones[i, t] = True
        rewards[i, t] += 1.0
    return {
        "image": torch.randint(0, 256, (n, K, S, S, 3), generator=g, dtype=torch.uint8),
        "task": ["reach"] * n,
        "tokens": torch.randint(0, 256, (n, K, C * D), generator=g),
        # the policy starts uniform (log 1/256); ratios exp(+-0.3) exercise the clip
        "logprobs": -torch.log(torch.tensor(256.0)) + 0.3 * torch.randn(n, K, C * D, generator=g),
        "rewards": rewards, "dones": dones, "success": success, "version": 0,
        # the env's second verdict: every third one flipped (the wm/* metrics' input)
        "resample_success": success ^ (torch.arange(n) % 3 == 0),
    }


def rank_batches(scenario: str) -> list[dict]:
    return [make_batch(groups, seed=10 * r + 1) for r, groups in enumerate(SCENARIOS[scenario])]


def union(batches: list[dict]) -> dict:
    out = {k: torch.cat([b[k] for b in batches]) for k in batches[0] if k not in ("task", "version")}
    return dict(out, task=sum((b["task"] for b in batches), []), version=0)


def run_update(batches: list[dict], aggregation: str, strategy, grad_clip: float):
    """One GRPO update under a real Trainer -> (parameter change, metrics)."""
    import lightning as L
    from toys import GivenRollouts, LinearBinPolicy

    from wmrl.module import GRPOModule

    class SGDModule(GRPOModule):  # SGD(lr=1): the parameter change is -(clipped) gradient
        def configure_optimizers(self):
            return torch.optim.SGD(self.policy.parameters(), lr=1.0)

    torch.manual_seed(0)
    module = SGDModule(LinearBinPolicy(chunk=C, action_dim=D, image_size=S), group_size=GROUP,
                       temperature=1.0, algorithm=dict(
                           grad_clip=grad_clip, aggregation=aggregation,
                           global_batch=64, micro_batch=4))  # one step of several micro-batches
    before = {k: v.detach().clone() for k, v in module.policy.state_dict().items()}
    trainer = L.Trainer(accelerator="cpu", devices=len(batches), strategy=strategy, max_steps=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=False)
    trainer.fit(module, datamodule=GivenRollouts(batches, per_rank=True))
    assert trainer.global_step == 1
    after = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach()
             for k, v in module.policy.state_dict().items()}
    return {k: after[k] - before[k] for k in before}, dict(module.last_metrics)


LORA_POLICY = {"_target_": "wmrl.policies.openvla_oft.build_policy",
               "lora": {"rank": 4, "alpha": 8, "init": False}}  # B random: every adapter learns


def lora_batches() -> list[dict]:
    """The "uneven" scenario for the tiny OpenVLA-OFT (chunks of 8 x 7 tokens, 32 px)."""
    return [make_batch(groups, seed=10 * r + 1, c=8, d=7, s=32)
            for r, groups in enumerate(SCENARIOS["uneven"])]


def run_lora_update(batches: list[dict], strategy, ckpt: str | None = None):
    """One GRPO update of a LoRA policy (SGD lr 1 on the adapters, KL to the base) -> the
    adapters' change; with ``ckpt``, saved there and read back into a fresh module."""
    import lightning as L
    from toys import GivenRollouts

    from wmrl.module import GRPOModule

    class SGDModule(GRPOModule):
        def configure_optimizers(self):
            return torch.optim.SGD([p for p in self.policy.parameters() if p.requires_grad],
                                   lr=1.0)

    def module():
        torch.manual_seed(0)
        return SGDModule(LORA_POLICY, group_size=GROUP, temperature=1.0, algorithm=dict(
            grad_clip=NO_CLIP, global_batch=64, micro_batch=4, kl_coef=0.1))

    def trainer():
        return L.Trainer(accelerator="cpu", devices=len(batches), strategy=strategy(),
                         max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         use_distributed_sampler=False)

    def adapters(m):
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
                for k, v in m.policy.state_dict().items() if ".lora_" in k}

    first = module()
    before = adapters(first)
    t = trainer()
    t.fit(first, datamodule=GivenRollouts(batches, per_rank=True))
    after = adapters(first)
    delta = {k: after[k] - before[k] for k in before}
    if ckpt is None:
        return delta
    t.save_checkpoint(ckpt)  # HybridShardStrategy: a DCP folder of the adapters alone
    again = module()
    trainer().fit(again, datamodule=GivenRollouts(batches, per_rank=True), ckpt_path=ckpt)
    restored = adapters(again)
    return delta, max(float((restored[k] - after[k]).abs().max()) for k in after)


def cases():
    for scenario in SCENARIOS:
        for aggregation in AGGREGATIONS:
            yield scenario, aggregation, NO_CLIP
    yield "uneven", "traj-mean", CLIP


def two_rank_main(out_dir: str) -> None:
    """Every case under FSDP2, HSDP (2-D mesh: 2 replicas x 1 shard) and DDP; rank 0 saves
    the results."""
    from lightning.pytorch.strategies import DDPStrategy

    from strategies import HybridShardStrategy

    torch.set_num_threads(1)
    results = {}
    for name in ("fsdp2", "hsdp", "ddp"):
        t = time.perf_counter()
        for scenario, aggregation, clip in cases():
            strategy = (DDPStrategy(process_group_backend="gloo") if name == "ddp" else
                        HybridShardStrategy(shard_size="world" if name == "fsdp2" else 1,
                                            param_dtype=None, reduce_dtype=None,
                                            gradient_clip_norm=None))
            results[name, scenario, aggregation, clip] = run_update(
                rank_batches(scenario), aggregation, strategy, clip)
        print(f"{name}: {time.perf_counter() - t:.1f} s", flush=True)
    ckpt = os.path.join(out_dir, "lora.ckpt")
    results["lora_fsdp2"] = run_lora_update(lora_batches(), lambda: HybridShardStrategy(
        shard_size="world", param_dtype=None, reduce_dtype=None, gradient_clip_norm=None),
        ckpt=ckpt)
    if torch.distributed.get_rank() == 0:
        torch.save(results, os.path.join(out_dir, "two_rank.pt"))


def rank_main(out_dir: str, rank: int, port: int) -> None:
    """One rank of the 2-rank run, in a forked process."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0",
                      LOCAL_RANK=str(rank), WORLD_SIZE="2")
    two_rank_main(out_dir)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rel_error(delta: dict, ref: dict) -> float:
    num = sum(float((delta[k] - ref[k]).pow(2).sum()) for k in ref) ** 0.5
    return num / sum(float(ref[k].pow(2).sum()) for k in ref) ** 0.5


@pytest.mark.slow
def test_two_ranks_update_exactly_as_one_rank_on_the_union(tmp_path):
    t0 = time.perf_counter()
    # the 2 ranks are forks of this process: it has torch and Lightning imported already (a
    # fresh interpreter takes seconds to import them); LOCAL_RANK tells Lightning that the
    # processes are launched
    gc.collect()  # nothing half-dead for the forks to collect
    assert not torch.distributed.is_initialized(), "a test left a default process group"
    fork = multiprocessing.get_context("fork")
    port = free_port()
    procs = [fork.Process(target=rank_main, args=(str(tmp_path), rank, port), daemon=True)
             for rank in range(2)]
    for proc in procs:
        proc.start()
    # meanwhile, the single-process reference on the union of the ranks' batches
    refs = {(scenario, aggregation, clip): run_update(
        [union(rank_batches(scenario))], aggregation, "auto", clip)
        for scenario, aggregation, clip in cases()}
    for rank, proc in enumerate(procs):
        proc.join(timeout=300)
        if proc.is_alive():
            proc.kill()
        assert proc.exitcode == 0, f"rank {rank} ended with {proc.exitcode} (its output above)"
    lora_ref = run_lora_update([union(lora_batches())], lambda: "auto")
    results = torch.load(tmp_path / "two_rank.pt", weights_only=True)
    # LoRA under FSDP2 (frozen base and float32 adapters in one sharded module): the
    # adapters move as one rank's on the union; the checkpoint is a DCP folder of the
    # adapters alone, and a fresh module restores them from it
    lora_delta, restore_error = results.pop("lora_fsdp2")
    assert rel_error(lora_delta, lora_ref) < 1e-5 and restore_error == 0.0
    from strategies.checkpoint import load_full_state_dict

    saved = load_full_state_dict(tmp_path / "lora.ckpt")
    assert saved and all(".lora_" in k for k in saved)
    errors, metric_errors = {}, []
    for (name, scenario, aggregation, clip), (delta, metrics) in results.items():
        ref_delta, ref_metrics = refs[scenario, aggregation, clip]
        errors[name, scenario, aggregation, clip] = rel_error(delta, ref_delta)
        assert ref_metrics["train/grad_norm"] > 10 * CLIP  # the CLIP case really clips
        # the token-averaged metrics, loss and grad norm are reduced over ranks: exact too;
        # so are the rollout and world-model figures, though the ranks hold 4 and 8 episodes
        # ("uneven": a mean of the ranks' means would be off)
        for key in ("train/loss", "train/grad_norm", "train/approx_kl", "train/clip_fraction",
                    "train/ratio_mean", "train/ratio_max", "train/entropy", "rollout/return",
                    "rollout/success", "rollout/episode_len", "rollout/kept_groups",
                    "wm/fragile_success", "wm/resample_agreement", "wm/resample_success"):
            if metrics[key] != pytest.approx(ref_metrics[key], rel=1e-5, abs=1e-7):
                metric_errors.append((name, scenario, aggregation, clip, key, metrics[key],
                                      ref_metrics[key]))
    print({k: f"{v:.2e}" for k, v in errors.items()})
    bad = {k: v for k, v in errors.items() if not v < 1e-5}
    assert not bad, f"2-rank update differs from the union's (relative L2 error): {bad}"
    assert not metric_errors, f"2-rank metrics differ from the union's: {metric_errors}"
    print(f"took {time.perf_counter() - t0:.1f} s")


def test_validate_refuses_clipping_twice():
    from conftest import CONF_DIR
    from hydra import compose, initialize_config_dir

    from wmrl.config import ConfigError, validate

    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        cfg = compose("fit", overrides=["run_dir=/tmp/wmrl-test", "strategy=hybrid_shard"])
    validate(cfg)  # the shipped sharded strategies leave clipping to the module
    assert cfg.strategy.gradient_clip_norm is None and cfg.algorithm.grad_clip == 1.0
    cfg.strategy.gradient_clip_norm = 1.0
    with pytest.raises(ConfigError, match=r"strategy\.gradient_clip_norm.*algorithm\.grad_clip"):
        validate(cfg)
    cfg.algorithm.grad_clip = None  # the strategy alone may clip
    validate(cfg)

