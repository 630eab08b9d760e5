"""``GRPOModule``: the LightningModule whose ``training_step`` is one whole RL step.

``training_step`` reads top to bottom (the DataModule is ``RolloutDataModule``):

0. the rollout actors hold the policy of version v (synced at ``on_train_start``, then at the
   end of every step);
1. rollout + score: ``datamodule.rollout`` runs every env for an episode with those weights;
   the env's reward model scores the imagined frames (rewards, success per episode). Where
   the rollout shares the trainer's card (collocated on an accelerator) the trainer's
   weights and optimizer state leave it meanwhile (``strategies.offload``);
2. advantages + update (``update``), below;
3. sync: version v+1 to the actors (``datamodule.sync_weights``);
4. PACE (``pace``, off unless configured: ``wmrl.pace.round.Pace``): after every
   ``pace.every_n_steps``-th step the world model fine-tunes on real simulator episodes of
   the policy v+1 and goes to the env actors, so the next rollout runs in it; the simulator
   budget (``pace/*``) is logged every step. Its state is in the checkpoint (``"pace"``).

No callback is needed for a correct step; callbacks add the optional extras (sim eval,
tracing, checkpoints, step summaries).

``update``:

1. the stages of ``wmrl/algorithms/update.py``: returns and step masks, one advantage per
   episode from the configured estimator (``algorithm.adv_estimator``:
   ``wmrl/algorithms/advantages.py``), the keep-mask (all-fail / all-success groups carry no
   gradient; with ``drop_unrepeatable`` the episodes whose two imagined verdicts disagree are
   left out first), the rollout counts, the samples and their padding across ranks;
2. the valid (trajectory, chunk) samples are shuffled and cut into mini-batches of
   ``global_batch`` samples, each one optimizer step; a mini-batch is processed in
   ``micro_batch`` pieces whose losses are weighted so their sum is exactly the mini-batch
   loss (``aggregation_weights`` on the whole batch, rescaled by |batch| / |mini-batch|);
3. ``update_epochs`` passes over the batch; AdamW, grad-norm clipping; the learning rate
   follows ``lr_schedule`` over the run's training steps (``lr_multiplier``), one value for
   all optimizer steps of a batch.

``trainer.global_step`` (so ``trainer.max_steps``, ``every_n_steps``, checkpoint names)
counts training steps = rollout batches, however many optimizer steps a batch takes.

``kl_coef`` > 0 adds GRPO's KL penalty to a frozen reference: a copy of the policy as built
(the base weights; ``reference_policy``, a submodule, so the strategy places, shards and
offloads it like the policy). It is left out of checkpoints (it is rebuilt from the policy
config on resume) and costs one no-grad forward per micro-batch.

LoRA (``policy.lora``, ``wmrl/weights/lora.py``): the base is frozen and only the adapters train, so
the reference is the policy itself with its adapters switched off (no second copy); the
optimizer holds the adapters, checkpoints hold them alone (the base is rebuilt from the policy
config on resume) and weight syncs send them alone (the actors build the same base).

With ``gradient_accumulation: false`` every micro-batch is its own optimizer step.

An optimizer step whose log-probs, loss or grad norm is NaN/Inf is skipped (weights and AdamW
state untouched, counted in ``train/nonfinite_steps``); ``max_nonfinite_steps`` in a row stop
the run with a ``RuntimeError``.

Data-parallel ranks (DDP, FSDP2): the loss normalisers (kept trajectories, valid tokens) are
summed over ranks and the weights multiplied by the world size, which the strategy's gradient
averaging divides out again, so R ranks holding B_1..B_R take exactly the optimizer step one
rank takes on their union (one mini-batch per batch; with several, each rank shuffles and
splits its own samples). Ranks are padded to the same micro-batch count with zero-weight
samples (a rank that keeps no group runs only those). Gradients are clipped here, once, by
their global norm (``grad_clip``); a strategy must not clip again (``config.validate``).
The train/*, rollout/* and wm/* metrics are reduced over ranks: each is the figure of the
union of the ranks' batches (rollout/* and wm/* from summed numerators and denominators).
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict
from functools import partial
from typing import Any

import lightning as L
import torch
from lightning.pytorch.core.optimizer import do_nothing_closure
from lightning.pytorch.utilities import rank_zero_warn

from strategies import full_state_dict
from strategies.offload import offload, onload
from wmrl.algorithms import grpo
from wmrl.algorithms import update as stages
from wmrl.algorithms.config import AlgorithmConfig, check_optimizer_dtype
from wmrl.algorithms.lr_schedule import lr_multiplier
from wmrl.build import build
from wmrl.errors import ConfigError
from wmrl.interfaces import RolloutSource, TrajectoryBatch
from wmrl.measure.tracing import Tracer
from wmrl.weights.lora import (
    adapters_disabled,
    config_json,
    has_lora,
    is_adapter_key,
    synced_entries,
)

_REFERENCE = "reference_policy."


def _drop_reference_keys(module: Any, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    # the frozen reference is the base policy, rebuilt from config: checkpoints skip it
    for key in [k for k in state_dict if k.startswith(prefix + _REFERENCE)]:
        del state_dict[key]


def _allow_missing_reference_keys(module: Any, incompatible: Any) -> None:
    incompatible.missing_keys[:] = [k for k in incompatible.missing_keys
                                    if not k.startswith(_REFERENCE)]


class GRPOModule(L.LightningModule):
    def __init__(self, policy: Any, *, group_size: int, temperature: float,
                 algorithm: AlgorithmConfig | dict | None = None, seed: int = 0,
                 pace: dict | None = None):
        """``policy``: its ``_target_`` spec; ``group_size`` / ``temperature``: the rollout's
        (``rollout.*``); ``algorithm``: every setting of the update (``AlgorithmConfig``, or
        a mapping of its fields; None: the defaults); ``pace``: PACE's spec (None: off)."""
        super().__init__()
        self.algorithm = cfg = AlgorithmConfig.of(algorithm)
        # plain config data, in every checkpoint: GRPOModule.load_from_checkpoint(path)
        # rebuilds the module (the policy from its spec)
        self.save_hyperparameters(dict(policy=policy, group_size=group_size,
                                       temperature=temperature, algorithm=asdict(cfg),
                                       seed=seed, pace=pace), logger=False)
        self.policy = build(policy)
        # the world model follows the policy (a ``_target_`` spec, conf/pace: ``Pace`` with its
        # settings as one ``wmrl.schema.PaceConfig``; None: off)
        self.pace = None if pace is None else build(pace, _recursive_=False)
        self.lora = has_lora(self.policy)
        check_optimizer_dtype(self.policy, cfg.optimizer_dtype)
        # checkpoints of a LoRA policy hold its adapters; the base is rebuilt from config
        self.strict_loading = not self.lora
        self.reference_policy = None
        if cfg.kl_coef > 0 and not self.lora:  # with LoRA: the adapters switched off
            self.reference_policy = copy.deepcopy(self.policy).requires_grad_(False).eval()
            self.register_state_dict_post_hook(_drop_reference_keys)
            self.register_load_state_dict_post_hook(_allow_missing_reference_keys)
        self.group_size = group_size
        self.temperature = temperature
        self.shuffle = torch.Generator().manual_seed(seed)
        self.nonfinite_run = 0  # skipped optimizer steps in a row, across training steps
        self.policy_version = 0  # bumped after each batch's updates; rollouts must match it
        self.automatic_optimization = False
        self.history: list[dict[str, float]] = []  # per-step metrics of this run
        self._offload_for_rollout = False  # the rollout shares the trainer's card
        self._offloaded = False

    def on_fit_start(self) -> None:
        # under FSDP2 (strategies.HybridShardStrategy) only forward() gathers the shards;
        # the policy's entry points are log_probs/sample, so they get the same hooks
        from torch.distributed.fsdp import FSDPModule, register_fsdp_forward_method

        for module in (self.policy, self.reference_policy):
            if isinstance(module, FSDPModule):
                for method in ("log_probs", "sample"):
                    register_fsdp_forward_method(module, method)
        if self.pace is not None and self._policy_sharded():
            raise RuntimeError("pace: the policy is sharded (FSDP); PACE runs it whole on "
                               "rank 0 - use a replicated strategy or switch pace off")

    def configure_optimizers(self) -> dict[str, Any]:
        a = self.algorithm
        params = [p for p in self.policy.parameters() if p.requires_grad]  # LoRA: adapters
        opt = torch.optim.AdamW(params, lr=a.lr, betas=tuple(a.betas),
                                eps=a.eps, weight_decay=a.weight_decay)
        total = a.lr_schedule_steps
        if total is None:  # the run's training steps
            total = self.trainer.max_steps
        if a.lr_schedule != "constant" and total < 1:
            raise ValueError(
                f"algorithm.lr_schedule={a.lr_schedule} needs the run's length: "
                f"set trainer.max_steps or algorithm.lr_schedule_steps (got {total})")
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_multiplier(
            step, total, a.lr_schedule, a.lr_warmup_steps, a.lr_min_ratio))
        # stepped by hand after every training step (manual optimization); Lightning saves
        # and restores its state with the checkpoint, so a resumed run keeps its place
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _step(self, opt: Any, counted: bool) -> None:
        """One optimizer step (taken, or skipped with no gradients). Lightning counts the
        steps that go through ``LightningOptimizer.step``: only the first of a training step
        does (``counted``); the others take the strategy's own ``optimizer_step`` (the same
        precision and strategy path, uncounted). So ``trainer.global_step`` counts rollout
        batches, and with it ``trainer.max_steps``, every ``every_n_steps`` and the
        checkpoints' names, whatever ``global_batch``, ``update_epochs`` or
        ``gradient_accumulation`` make of a batch (Lightning alone would count each
        optimizer step, a number that varies with the groups kept)."""
        if counted:
            opt.step()
        else:
            self.trainer.strategy.optimizer_step(opt.optimizer, do_nothing_closure, self)

    def _step_lr_schedule(self) -> None:
        """The lr after a training step: the schedule counts training steps, as max_steps."""
        sched = self.lr_schedulers()
        if sched is not None:
            sched.step()

    # ---- the step --------------------------------------------------------------------
    @property
    def rollouts(self) -> RolloutSource:
        dm = self.trainer.datamodule
        if not isinstance(dm, RolloutSource):
            raise TypeError(f"GRPOModule needs a rollout DataModule (wmrl.interfaces."
                            f"RolloutSource, e.g. RolloutDataModule); got {type(dm).__name__}")
        return dm

    def on_train_start(self) -> None:
        # Lightning warns of every module in eval mode, the frozen reference's included
        # (wmrl/fit.py silences that); only the trained policy's would be a mistake
        frozen = [name for name, m in self.policy.named_modules() if not m.training]
        if frozen:
            rank_zero_warn(f"{len(frozen)} module(s) of the trained policy are in eval mode at "
                           f"the start of training ({', '.join(frozen[:3])}, ...): dropout and "
                           "norm layers behave as in inference")
        # the actors start at the trainer's version: 0, or the restored one on resume
        self._offload_for_rollout = self.rollouts.shares_trainer_device()
        self.sync_policy()
        if self.pace is not None:  # resumed: the env actors get the restored world model
            self.pace.restore_actors(self.rollouts, self._weights_for_restarted_actor,
                                     rank0=self.trainer.is_global_zero)

    def training_step(self, step: int) -> None:
        """One RL step: rollout with version v -> score -> advantages -> update -> sync v+1
        [-> a PACE round]."""
        rollouts, t0 = self.rollouts, time.perf_counter()
        moved = self._offload("offload")  # a rollout on the trainer's card: our state leaves
        with Tracer.trace_span("trainer.rollout", version=self.policy_version):
            batch = rollouts.rollout(weights=self._weights_for_restarted_actor)
        moved.update(self._offload("onload"))
        t_rollout = time.perf_counter() - t0
        if batch.version != self.policy_version:
            raise RuntimeError(
                f"rollout used policy version {batch.version} but the trainer is at "
                f"{self.policy_version}: weight sync did not reach the rollout workers")
        with Tracer.trace_span("trainer.update", version=self.policy_version):
            metrics = self.update(batch)  # advantages, then the optimizer steps
        t_train = time.perf_counter() - t0 - t_rollout
        self.policy_version += 1
        metrics["time/weight_sync_s"] = self.sync_policy()  # the next rollout's weights
        if self.pace is not None:  # the next rollout's world model, every pace.every_n_steps
            metrics.update(self._pace_step())
        metrics.update({"time/rollout_s": t_rollout, "time/train_s": t_train, **moved})
        metrics.update({f"time/{k}": v for k, v in rollouts.step_timing().items()})
        if "time/idle_s" in metrics and t_rollout + t_train > 0:
            metrics["time/idle_frac"] = metrics["time/idle_s"] / (t_rollout + t_train)
        self.log_dict(metrics, on_step=True, prog_bar=False, batch_size=1)
        self.log_dict({"reward": metrics["rollout/return"], "success": metrics["rollout/success"]},
                      on_step=True, prog_bar=True, batch_size=1)
        self.history.append(metrics)

    def sync_policy(self) -> float:
        """The trainer's policy, whole, to this rank's rollout actors as ``policy_version``
        (every rank owns its actors); returns seconds."""
        with Tracer.trace_span("trainer.weight_sync", version=self.policy_version):
            return self.rollouts.sync_weights(self._synced_state(), self.policy_version)

    def _synced_state(self) -> dict[str, torch.Tensor]:
        """What the actors need of the policy: all of it, or with LoRA the adapters alone."""
        return full_state_dict(self.policy, keep=synced_entries(self.policy))

    def _pace_step(self) -> dict[str, float]:
        """A PACE round if one is due after this step (``trainer.global_step``: the steps
        finished, this one included); the cumulative simulator budget, and the round's
        metrics."""
        trainer, step = self.trainer, self.trainer.global_step
        metrics: dict[str, float] = {}
        if self.pace.round_due(step, trainer.max_steps):
            # several ranks: rank 0 trains, every rank pushes its weights to its own actors
            broadcast = partial(trainer.strategy.broadcast, src=0) \
                if trainer.world_size > 1 else None
            with Tracer.trace_span("trainer.pace", version=self.policy_version):
                metrics = self.pace.run_round(
                    self.policy, self.rollouts, step, device=self.device,
                    rank0=trainer.is_global_zero, broadcast=broadcast,
                    policy_weights=self._weights_for_restarted_actor)
        return {**self.pace.ledger.counts(), **metrics}

    def _policy_sharded(self) -> bool:
        return self.trainer.world_size > 1 and any(hasattr(p, "full_tensor")
                                                   for p in self.policy.parameters())

    def _weights_for_restarted_actor(self) -> dict[str, torch.Tensor]:
        """The current weights for an actor Ray restarted mid-rollout (on this rank only)."""
        if self._policy_sharded():
            raise RuntimeError(
                "a rollout actor was restarted, but re-syncing sharded (FSDP) weights needs "
                "every trainer rank: resume from <run_dir>/checkpoints/last.ckpt")
        return self._synced_state()

    def _offload(self, direction: str) -> dict[str, float]:
        """``offload``: weights, gradients and AdamW state to the host; ``onload``: back.
        Only where the rollout runs on the trainer's card (``on_train_start`` asks).
        Returns ``{direction/seconds, direction/gb}`` (empty when nothing moved)."""
        if not self._offload_for_rollout or self._offloaded == (direction == "offload"):
            return {}
        opt = getattr(self.optimizers(), "optimizer", None)
        if direction == "offload":
            stats = offload(self, opt, "cpu")
        else:
            stats = onload(self, opt, self.trainer.strategy.root_device)
        self._offloaded = direction == "offload"
        return {f"{direction}/seconds": stats.seconds, f"{direction}/gb": stats.bytes / 1e9}

    def on_train_end(self) -> None:
        # the model where the user expects it (checkpoints, evaluation)
        self._offload("onload")
        if self.pace is not None and self.trainer.is_global_zero:
            self.pace.finish()  # <pace.out_dir>/summary.json, the simulator budget

    @property
    def last_metrics(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def update(self, batch: TrajectoryBatch) -> dict[str, float]:
        """All optimizer steps for one rollout batch; returns step metrics (floats). The
        stages are ``wmrl.algorithms.update``'s; what crosses ranks is done here."""
        a = self.algorithm
        n, k, per_chunk = batch.tokens.shape
        scored = stages.score_episodes(
            batch.rewards, batch.dones, batch.success, k, self.group_size, a.adv_estimator,
            a.advantage_scale, a.filter_groups,
            None if a.return_filter is None else tuple(a.return_filter),
            a.drop_unrepeatable, batch.resample_success)
        # the batch's figures over the union of the ranks' episodes (one all-reduce of sums)
        counts = stages.rollout_counts(scored, batch.success, batch.resample_success)
        opt = self.optimizers()
        metrics = {"train/lr": getattr(opt, "optimizer", opt).param_groups[0]["lr"],  # this batch's
                   **stages.ratios(self._sum_counts_over_ranks(counts))}
        rows, token_mask = stages.kept_tokens(scored, per_chunk)  # [n'], [n', K*L]
        world = self.trainer.world_size
        if world == 1:
            weights = grpo.aggregation_weights(token_mask, a.aggregation)
        else:
            # the union's normalisers, and x world size against the strategy's gradient mean:
            # sum_r (rank r's gradient) / R = the gradient of one rank on the union batch
            n_rows, n_tokens = self._sum_over_ranks([len(rows), int(token_mask.sum())])
            weights = grpo.aggregation_weights(token_mask, a.aggregation,
                                               rows=n_rows, tokens=n_tokens) * world
        samples = stages.flatten_samples(scored, rows, weights.view(-1, k, per_chunk))
        # every rank must run the same micro-batches (FSDP collectives)
        target = self._max_over_ranks(len(samples))
        if target == 0:
            # nothing to learn anywhere. Still take one (empty) optimizer step so Lightning's
            # step count - and trainer.max_steps - follows rollout batches; AdamW skips
            # parameters without gradients, so weights and state are untouched.
            self.optimizers().zero_grad(set_to_none=True)
            self._step(self.optimizers(), counted=True)
            self._step_lr_schedule()
            return metrics
        s = stages.pad_samples(samples, target)
        src, chunk = s.episode, s.chunk
        metrics.update(self._optimize({
            "image": batch.image[src, chunk],
            "task": [batch.task[i] for i in src.tolist()],
            "tokens": batch.tokens[src, chunk],
            "old_logprobs": batch.logprobs[src, chunk].float(),
            "advantages": s.advantages,
            "weights": s.weights,
        }))
        return metrics

    def _max_over_ranks(self, n: int) -> int:
        if self.trainer.world_size == 1:
            return n
        t = torch.tensor(n, device=self.device)
        return int(self.trainer.strategy.reduce(t, reduce_op="max"))

    def _sum_counts_over_ranks(self, counts: dict[str, tuple[float, float]]
                               ) -> dict[str, tuple[float, float]]:
        """(numerator, denominator) per metric, each summed over the ranks (float64)."""
        if self.trainer.world_size == 1:
            return counts
        t = torch.tensor(list(counts.values()), dtype=torch.float64, device=self.device)
        t = self.trainer.strategy.reduce(t, reduce_op="sum").cpu()
        return {k: (float(t[i, 0]), float(t[i, 1])) for i, k in enumerate(counts)}

    def _sum_over_ranks(self, counts: list[int]) -> list[int]:
        t = torch.tensor(counts, dtype=torch.long, device=self.device)
        return self.trainer.strategy.reduce(t, reduce_op="sum").tolist()

    def _optimize(self, s: dict[str, Any]) -> dict[str, float]:
        opt = self.optimizers()
        total = s["tokens"].shape[0]
        a = self.algorithm
        step = a.global_batch if a.gradient_accumulation else a.micro_batch
        # metrics stay on the device until the end of the update: one host sync, not one
        # per metric per micro-batch
        zero = torch.zeros((), device=self.device)
        token_sums: dict[str, torch.Tensor] = {}  # summed over valid tokens
        valid, loss_sum, norm_sum, ratio_max, steps, skipped = zero, zero, zero, zero, 0, 0
        for _ in range(a.update_epochs):
            order = torch.randperm(total, generator=self.shuffle)
            for mb in torch.tensor_split(order, max(1, math.ceil(total / step))):
                scale = total / len(mb)  # mini-batch loss estimates the full-batch loss
                # this step's sums, kept only if it is taken; flags: non-finite log-probs, loss
                part: dict[str, torch.Tensor] = {"valid": zero, "loss": zero, "ratio_max": zero}
                bad = torch.zeros(2, dtype=torch.bool, device=self.device)
                for micro in torch.split(mb, a.micro_batch):
                    with Tracer.trace_span("trainer.micro_batch", size=len(micro)):
                        loss, m, n_valid, logprobs_ok = self._micro_loss(s, micro, scale)
                        self.manual_backward(loss)
                    bad = bad | torch.stack([~logprobs_ok, ~torch.isfinite(loss.detach())])
                    part["loss"] = part["loss"] + loss.detach()
                    part["ratio_max"] = torch.maximum(part["ratio_max"], m.pop("ratio_max"))
                    for key, v in m.items():
                        part[key] = part.get(key, zero) + v * n_valid
                    part["valid"] = part["valid"] + n_valid
                with Tracer.trace_span("trainer.optimizer_step"):
                    norm = self._clip_and_step(opt, bad, counted=steps == 0)
                steps += 1
                if norm is None:
                    skipped += 1
                    continue
                valid, loss_sum = valid + part.pop("valid"), loss_sum + part.pop("loss")
                ratio_max = torch.maximum(ratio_max, part.pop("ratio_max"))
                norm_sum = norm_sum + norm
                for key, v in part.items():
                    token_sums[key] = token_sums.get(key, zero) + v
        self._step_lr_schedule()
        world = self.trainer.world_size
        if world > 1:
            # every rank's loss is R x its share of the union's loss (see update): the mean
            # over ranks is the union's loss; token sums add up; grad_norm is already global
            sums = self.trainer.strategy.reduce(
                torch.stack([*token_sums.values(), valid, loss_sum / world]), reduce_op="sum")
            token_sums = dict(zip(token_sums, sums[:-2]))
            valid, loss_sum = sums[-2], sums[-1]
            ratio_max = self.trainer.strategy.reduce(ratio_max, reduce_op="max")
        names = list(token_sums) + ["loss", "grad_norm", "ratio_max"]
        taken = max(1, steps - skipped)  # the metrics are those of the steps taken
        values = torch.stack([v / valid.clamp(min=1) for v in token_sums.values()]
                             + [loss_sum / taken, norm_sum / taken, ratio_max]).tolist()
        out = {f"train/{k}": v for k, v in zip(names, values)}
        out["train/optimizer_steps"] = float(steps)
        out["train/nonfinite_steps"] = float(skipped)
        return out

    def _micro_loss(self, s: dict[str, Any], idx: torch.Tensor, scale: float):
        """-> (loss, metrics as 0-d device tensors, number of valid tokens, whether all
        log-probs are finite as a 0-d bool tensor)."""
        dev = self.device
        obs = {"image": s["image"][idx].to(dev), "task": [s["task"][i] for i in idx.tolist()]}
        tokens = s["tokens"][idx].to(dev)
        logprobs, entropy = self.policy.log_probs(obs, tokens, self.temperature,
                                                  return_entropy=True)
        ref_logprobs = None
        if self.algorithm.kl_coef > 0:
            ref_logprobs = self._reference_log_probs(obs, tokens).float()
        weights = s["weights"][idx].to(dev)
        mask = weights > 0  # padding samples (see update) count in neither loss nor metrics
        loss, m = grpo.policy_loss(
            logprobs.float(), s["old_logprobs"][idx].to(dev), s["advantages"][idx].to(dev),
            mask, weights=weights * scale, ref_logprobs=ref_logprobs,
            kl_coef=self.algorithm.kl_coef, clip_low=self.algorithm.clip_low,
            clip_high=self.algorithm.clip_high, dual_clip=self.algorithm.dual_clip,
        )
        n_valid = mask.sum().float()
        m["entropy"] = torch.where(mask, entropy.float(), 0.0).sum() / n_valid.clamp(min=1)
        return loss, m, n_valid, torch.isfinite(logprobs.detach()).all()

    @torch.no_grad()
    def _reference_log_probs(self, obs: dict, tokens: torch.Tensor) -> torch.Tensor:
        """log pi_ref: the frozen copy, or with LoRA the policy with its adapters off."""
        if self.reference_policy is not None:
            return self.reference_policy.log_probs(obs, tokens, self.temperature)
        with adapters_disabled(self.policy):
            return self.policy.log_probs(obs, tokens, self.temperature)

    def _clip_and_step(self, opt: Any, bad: torch.Tensor, counted: bool) -> torch.Tensor | None:
        """Clip, step, zero; returns the pre-clip grad norm as a 0-d device tensor, or None if
        the step was skipped: ``bad`` = [non-finite log-probs, loss] of its micro-batches.

        The only gradient clipping of a run (``grad_clip``; None = measure, don't clip). The
        norm is global: the gradients are already averaged over ranks here (DDP all-reduce,
        FSDP2 reduce-scatter), and under FSDP2 they are DTensor shards whose norm torch
        reduces over the mesh, so every rank scales by the same union-batch norm.

        A step with a non-finite log-prob, loss (on any rank) or grad norm is skipped: the
        gradients are dropped and ``opt.step()`` runs with none, which AdamW skips without
        touching weights or state, so Lightning's step count still follows the steps. One
        host sync per step decides it; ``max_nonfinite_steps`` skips in a row raise."""
        params = [p for p in self.policy.parameters() if p.grad is not None]
        clip = self.algorithm.grad_clip
        max_norm = float("inf") if clip is None else clip
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else None
        if norm is None:
            norm = torch.zeros((), device=self.device)
        if hasattr(norm, "full_tensor"):  # DTensor under FSDP2
            norm = norm.full_tensor()
        norm = norm.detach().float()
        flags = torch.cat([bad, ~torch.isfinite(norm)[None]]).float()
        if self.trainer.world_size > 1:  # the same decision on every rank
            flags = self.trainer.strategy.reduce(flags, reduce_op="max")
        flags = flags.tolist()  # the step's one host sync
        if not any(flags):
            self._step(opt, counted)
            opt.zero_grad(set_to_none=True)
            self.nonfinite_run = 0
            return norm
        opt.zero_grad(set_to_none=True)
        self._step(opt, counted)  # no gradients: a no-op, counted as a taken step is
        self.nonfinite_run += 1
        if self.nonfinite_run >= self.algorithm.max_nonfinite_steps:
            what = ", ".join(n for n, f in zip(("log-probs", "loss", "grad norm"), flags) if f)
            raise RuntimeError(
                f"{self.nonfinite_run} optimizer steps in a row were non-finite (last one, at "
                f"global step {self.trainer.global_step}, policy version {self.policy_version}: "
                f"non-finite {what}); every one was skipped. Lower algorithm.lr (or "
                f"algorithm.grad_clip), and check the checkpoint / policy weights for NaN/Inf.")
        return None

    # ---- checkpoint extras -----------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.lora:  # the adapters; the frozen base is rebuilt from the policy config
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                        if not k.startswith("policy.") or is_adapter_key(k)}
            checkpoint["lora_config"] = config_json(self.policy)  # for scripts/export.py
        checkpoint["policy_version"] = self.policy_version
        checkpoint["shuffle_rng"] = self.shuffle.get_state()
        if self.pace is not None:
            checkpoint["pace"] = self.pace.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.lora and "state_dict" in checkpoint:  # a single file (DCP reads by key)
            want = {f"policy.{k}" for k in self.policy.state_dict() if is_adapter_key(k)}
            missing = sorted(want - set(checkpoint["state_dict"]))
            if missing:
                raise ConfigError(f"the checkpoint holds no {missing[0]} (and {len(missing) - 1} "
                                  "more adapter tensors): it was not written by a fit with "
                                  "this policy.lora")
        self.policy_version = int(checkpoint["policy_version"])
        self.shuffle.set_state(checkpoint["shuffle_rng"])
        if self.pace is not None:
            if checkpoint.get("pace") is not None:
                self.pace.load_state_dict(checkpoint["pace"])
