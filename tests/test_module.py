"""``GRPOModule.update`` on a hand-made batch, under a real Lightning Trainer, without Ray."""

import copy
import json
import math

import lightning as L
import pytest
import torch
from toys import GivenRollouts, LinearBinPolicy

from wmrl.errors import ConfigError
from wmrl.interfaces import TrajectoryBatch
from wmrl.module import GRPOModule


def hand_batch(version: int = 0) -> TrajectoryBatch:
    """2 groups of 2, one chunk of 8 steps, 56 tokens. Group 0: trajectory 0 succeeds
    (reward 1 at its last step) with every token = bin 10, trajectory 1 fails with bin 20.
    Group 1: both fail (bin 30): no variance, filtered out."""
    n, steps, length = 4, 8, 56
    tokens = torch.tensor([10, 20, 30, 30]).view(n, 1, 1).expand(n, 1, length).clone()
    rewards = torch.zeros(n, steps)
    rewards[0, -1] = 1.0
    dones = torch.zeros(n, steps, dtype=torch.bool)
    dones[:, -1] = True
    return TrajectoryBatch(
        image=torch.zeros(n, 1, 8, 8, 3, dtype=torch.uint8), tokens=tokens,
        logprobs=torch.full((n, 1, length), -math.log(256)),  # the zero-init policy: uniform
        rewards=rewards, dones=dones, success=torch.tensor([True, False, False, False]),
        task=["reach"] * n, version=version)


def make_module(policy=None, **kw) -> GRPOModule:
    """group size 2 at T = 1; the other keyword arguments are AlgorithmConfig's."""
    args = dict(lr=0.1, eps=1e-8, weight_decay=0.0, grad_clip=1.0, global_batch=8,
                micro_batch=2)
    return GRPOModule(policy=policy or {"_target_": "toys.LinearBinPolicy"}, group_size=2,
                      temperature=1.0, algorithm={**args, **kw})


def fit(module, batches, tmp_path, callbacks=()):
    trainer = L.Trainer(accelerator="cpu", max_steps=len(batches), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=list(callbacks))
    trainer.fit(module, datamodule=GivenRollouts(batches))
    return trainer


def test_update_moves_logits_towards_the_success_and_skips_flat_groups(tmp_path):
    module = make_module()
    fit(module, [hand_batch()], tmp_path)
    m = module.last_metrics
    assert m["rollout/success"] == 0.25 and m["rollout/kept_groups"] == 0.5
    assert m["rollout/return"] == 0.25 and m["train/optimizer_steps"] == 1.0
    assert module.policy_version == 1
    bias = module.policy.bias.detach()
    # AdamW's first step moves every parameter with a gradient by lr * sign(gradient):
    # advantages +-1/sqrt(2) push bin 10 (the success) up and bin 20 down by exactly lr; the
    # softmax terms of the two trajectories cancel for every other bin (bin 30 included).
    assert torch.allclose(bias[:, 10], torch.full((56,), 0.1), atol=1e-5)
    assert torch.allclose(bias[:, 20], torch.full((56,), -0.1), atol=1e-5)
    others = torch.ones(256, dtype=torch.bool)
    others[[10, 20]] = False
    assert bias[:, others].abs().max() < 1e-3
    assert module.policy.proj.weight.abs().max() == 0  # black images: no gradient there


def test_return_filter_drops_groups_outside_its_bounds(tmp_path):
    """Group returns [1, 0] (mean 0.5) and [0, 0]: [0.6, 4.5] drops both (nothing trains),
    [0.5, 4.5] keeps the first, as filter_groups would."""
    for bounds, kept, moved in (([0.6, 4.5], 0.0, False), ([0.5, 4.5], 0.5, True)):
        module = make_module(filter_groups=False, return_filter=bounds)
        fit(module, [hand_batch()], tmp_path)
        assert module.last_metrics["rollout/kept_groups"] == kept
        assert (module.policy.bias.detach().abs().max() > 0.05) == moved


# ---- non-finite steps ------------------------------------------------------------------
class NaNPolicy(LinearBinPolicy):
    """Log-probs NaN on the chosen ``log_probs`` calls (0-based; None: every call)."""

    def __init__(self, nan_calls=None):
        super().__init__()
        self.nan_calls, self.calls = nan_calls, 0

    def log_probs(self, obs, tokens, temperature, return_entropy=False):
        out, entropy = super().log_probs(obs, tokens, temperature, return_entropy=True)
        if self.nan_calls is None or self.calls in self.nan_calls:
            out = out + float("nan")  # still in the graph: its gradients are NaN too
        self.calls += 1
        return (out, entropy) if return_entropy else out


class Snapshots(L.Callback):
    """After every training step: weights, AdamW state, global step, the skip run."""

    def __init__(self):
        self.taken = []

    def on_train_batch_end(self, trainer, module, *args):
        self.taken.append({
            "weights": copy.deepcopy(module.policy.state_dict()),
            "adam": copy.deepcopy(trainer.optimizers[0].state_dict()["state"]),
            "global_step": trainer.global_step, "run": module.nonfinite_run})


def same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].keys() == b[k].keys() and all(torch.equal(a[k][n], b[k][n]) for n in a[k])
        for k in a)


def test_adamw_step_without_gradients_leaves_weights_and_state_alone():
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    before, weights = copy.deepcopy(opt.state_dict()["state"]), p.detach().clone()
    opt.zero_grad(set_to_none=True)
    opt.step()  # what a skipped step does, so that Lightning still counts it
    assert torch.equal(p.detach(), weights) and same_state(opt.state_dict()["state"], before)
    assert before[0]["step"] == 1


def test_nonfinite_step_is_skipped_and_a_good_one_resets_the_count(tmp_path):
    """good, NaN log-probs, good: the NaN step changes nothing but the step count, and the
    run ends where two good steps without it end."""
    module, snaps = make_module(NaNPolicy(nan_calls={1})), Snapshots()
    fit(module, [hand_batch(v) for v in range(3)], tmp_path, [snaps])
    good, skipped, after = snaps.taken
    assert good["adam"][0]["step"] == 1 and good["weights"]["bias"][0, 10] == pytest.approx(0.1, abs=1e-5)
    assert same_state({"w": skipped["weights"]}, {"w": good["weights"]})
    assert same_state(skipped["adam"], good["adam"])
    assert [s["global_step"] for s in snaps.taken] == [1, 2, 3]  # as without the skip
    assert [s["run"] for s in snaps.taken] == [0, 1, 0]
    assert [m["train/nonfinite_steps"] for m in module.history] == [0.0, 1.0, 0.0]
    assert all(m["train/optimizer_steps"] == 1.0 for m in module.history)
    assert math.isfinite(module.history[1]["rollout/return"])
    assert after["adam"][0]["step"] == 2 and module.policy_version == 3

    reference = make_module()
    fit(reference, [hand_batch(v) for v in range(2)], tmp_path)
    for name, w in reference.policy.state_dict().items():
        assert torch.allclose(after["weights"][name], w, atol=1e-7), name


def test_nonfinite_steps_in_a_row_stop_the_run_naming_the_tensor(tmp_path):
    module = make_module(NaNPolicy(), max_nonfinite_steps=2)
    with pytest.raises(RuntimeError, match="2 optimizer steps in a row.*global step 2, policy "
                                           "version 1: non-finite log-probs, loss, grad norm"
                                           ".*algorithm.lr"):
        fit(module, [hand_batch(v) for v in range(3)], tmp_path)
    assert torch.equal(module.policy.bias, torch.zeros_like(module.policy.bias))
    # the policy is fine, the batch's old log-probs are NaN: the loss is named, not log-probs
    bad = hand_batch()
    bad.logprobs[0] = float("nan")
    with pytest.raises(RuntimeError, match="global step 1, policy version 0: non-finite loss, "
                                           "grad norm\\)"):
        fit(make_module(max_nonfinite_steps=1), [bad], tmp_path)


# ---- learning-rate schedule ------------------------------------------------------------
def test_cosine_schedule_sets_each_steps_lr(tmp_path):
    # the lr each of 4 steps took (logged before its optimizer step), and the first step's
    # effect on the weights
    snaps = Snapshots()
    module = make_module(lr_schedule="cosine")
    fit(module, [hand_batch(v) for v in range(4)], tmp_path, callbacks=[snaps])
    lrs = [m["train/lr"] for m in module.history]
    assert lrs == pytest.approx([0.1, 0.0853553, 0.05, 0.0146447], abs=1e-7)
    # step 1 (lr 0.1, AdamW's bias-corrected first step = lr x sign): bin 10 up by exactly 0.1
    assert torch.allclose(snaps.taken[0]["weights"]["bias"][:, 10], torch.full((56,), 0.1),
                          atol=1e-5)


def test_a_training_step_is_one_global_step_however_many_optimizer_steps(tmp_path):
    """hand_batch keeps 2 samples (group 1 is flat): global_batch 1 cuts them into 2
    mini-batches and update_epochs 2 passes twice, so 4 AdamW steps a batch; yet each batch
    is one global step (max_steps = 4 batches runs all 4) and the cosine lr moves once per
    batch (the 4-step values of the test above)."""
    snaps = Snapshots()
    module = make_module(global_batch=1, micro_batch=1, update_epochs=2, lr_schedule="cosine")
    trainer = fit(module, [hand_batch(v) for v in range(4)], tmp_path, callbacks=[snaps])
    assert [s["global_step"] for s in snaps.taken] == [1, 2, 3, 4]
    assert [int(s["adam"][0]["step"]) for s in snaps.taken] == [4, 8, 12, 16]
    assert [m["train/optimizer_steps"] for m in module.history] == [4.0] * 4
    assert [m["train/lr"] for m in module.history] == pytest.approx(
        [0.1, 0.0853553, 0.05, 0.0146447], abs=1e-7)
    assert trainer.global_step == 4 and module.policy_version == 4

    # a batch with every group flat takes one empty (counted) step, and the lr moves on:
    # cosine over 2 steps is 0.1 then 0.05; AdamW holds no state until batch 2's 4 steps
    flat = hand_batch()
    flat.success.zero_()
    flat.rewards.zero_()
    snaps = Snapshots()
    module = make_module(global_batch=1, micro_batch=1, update_epochs=2, lr_schedule="cosine")
    fit(module, [flat, hand_batch(1)], tmp_path, callbacks=[snaps])
    assert [s["global_step"] for s in snaps.taken] == [1, 2]
    assert snaps.taken[0]["adam"] == {} and int(snaps.taken[1]["adam"][0]["step"]) == 4
    assert [m["train/lr"] for m in module.history] == pytest.approx([0.1, 0.05], abs=1e-7)


def test_cosine_schedule_needs_the_runs_length(tmp_path):
    module = make_module(lr_schedule="cosine")
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="trainer.max_steps or algorithm.lr_schedule_steps"):
        trainer.fit(module, datamodule=GivenRollouts([hand_batch()]))


def test_kl_penalty_pulls_the_policy_back_to_the_frozen_base(tmp_path):
    module = make_module(kl_coef=1.0, filter_groups=False)
    with torch.no_grad():  # the policy has drifted from the base: bin 30's logit is up by 1
        module.policy.bias[:, 30] = 1.0
    batch = hand_batch()
    batch.tokens.fill_(30)
    batch.rewards.zero_()
    batch.success.zero_()  # every group flat: zero advantages, only the KL term has a gradient
    fit(module, [batch], tmp_path)
    m = module.last_metrics
    # k3 at logp = 1 - log(e + 255), logp_ref = -log 256 (the reference is the zero-init base)
    d = -math.log(256) - (1 - math.log(math.e + 255))
    assert m["train/ref_kl"] == pytest.approx(math.exp(d) - d - 1, rel=1e-4)
    bias = module.policy.bias.detach()
    # AdamW's first step moves each parameter by lr * sign(gradient): back towards the base
    assert torch.allclose(bias[:, 30], torch.full((56,), 0.9), atol=1e-5)
    assert torch.allclose(bias[:, 31], torch.full((56,), 0.1), atol=1e-3)  # |grad| ~ 1e-5 vs eps
    assert module.reference_policy.bias.abs().max() == 0  # the reference never trains
    # checkpoints leave the reference out (rebuilt from the policy config) and load strictly
    state = module.state_dict()
    assert state and not any(k.startswith("reference_policy.") for k in state)
    fresh = make_module(kl_coef=1.0)
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.policy.bias, module.policy.bias)
    assert fresh.reference_policy.bias.abs().max() == 0
    # the same through torch.distributed.checkpoint's state-dict API (the DCP checkpoints)
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )
    dcp_state = get_model_state_dict(module)
    assert dcp_state.keys() == state.keys()
    again = make_module(kl_coef=1.0)
    set_model_state_dict(again, dcp_state, options=StateDictOptions(strict=True))
    assert torch.equal(again.policy.bias, module.policy.bias)
    with pytest.raises(ValueError, match="algorithm.kl_coef"):
        make_module(kl_coef=-0.1)


def test_without_kl_coef_there_is_no_reference(tmp_path):
    module = make_module()
    assert module.reference_policy is None
    fit(module, [hand_batch()], tmp_path)
    assert "train/ref_kl" not in module.last_metrics


def test_a_rollout_of_another_version_is_refused_and_every_step_syncs(tmp_path):
    """The step checks the rollout's version against its own and ends with the sync of the
    next version (0 at the start, then one per step)."""
    rollouts = GivenRollouts([hand_batch(0), hand_batch(1)])
    module = make_module()
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(module, datamodule=rollouts)
    assert rollouts.synced == [0, 1, 2] and module.policy_version == 2
    assert all(m["time/weight_sync_s"] == 0.0 for m in module.history)

    module = make_module()
    with pytest.raises(RuntimeError, match="rollout used policy version 3 but the trainer is "
                                           "at 0: weight sync did not reach"):
        fit(module, [hand_batch(3)], tmp_path)


def test_unrepeatable_episodes_are_dropped_from_the_update(tmp_path):
    """hand_batch with the env's second verdicts: the success of trajectory 0 is not repeated,
    so group 0 keeps one failure (flat): nothing trains, and a quarter of the episodes is
    dropped. Second verdicts that agree: the update of the plain test."""
    batch = hand_batch()
    batch.resample_success = torch.tensor([False, False, False, False])
    module = make_module(drop_unrepeatable=True)
    fit(module, [batch], tmp_path)
    m = module.last_metrics
    assert m["rollout/dropped_unrepeatable"] == 0.25 and m["rollout/kept_groups"] == 0.0
    assert module.policy.bias.detach().abs().max() == 0
    agree = hand_batch()
    agree.resample_success = agree.success.clone()
    module = make_module(drop_unrepeatable=True)
    fit(module, [agree], tmp_path)
    assert module.last_metrics["rollout/dropped_unrepeatable"] == 0.0
    assert module.last_metrics["rollout/kept_groups"] == 0.5
    assert torch.allclose(module.policy.bias.detach()[:, 10], torch.full((56,), 0.1), atol=1e-5)
    with pytest.raises(ValueError, match="env.resample_check=true"):
        fit(make_module(drop_unrepeatable=True), [hand_batch()], tmp_path)


# ---- LoRA (policy.lora, wmrl/weights/lora.py) ---------------------------------------------------
LORA_POLICY = {"_target_": "wmrl.policies.openvla_oft.build_policy",
               "lora": {"rank": 4, "alpha": 8, "init": False}}  # B random: the adapter acts


class RecordedSyncs(GivenRollouts):
    """GivenRollouts that keeps what every weight sync sent."""

    def __init__(self, batches):
        super().__init__(batches)
        self.sent: list[dict] = []

    def sync_weights(self, state_dict, version):
        self.sent.append({k: v.detach().clone() for k, v in state_dict.items()})
        return super().sync_weights(state_dict, version)


def policy_batch(version: int = 0, seed: int = 0) -> TrajectoryBatch:
    """2 groups of 2, one chunk, sampled by the tiny base policy; trajectory 0 succeeds."""
    from wmrl.policies.openvla_oft import build_policy

    g = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (4, 40, 40, 3), dtype=torch.uint8, generator=g)
    task = ["pick up the red block"] * 4
    s = build_policy().sample({"image": image, "task": task}, 1.0, generator=g)
    rewards, dones = torch.zeros(4, 8), torch.zeros(4, 8, dtype=torch.bool)
    rewards[0, -1], dones[:, -1] = 1.0, True
    return TrajectoryBatch(image=image[:, None], tokens=s.tokens[:, None],
                           logprobs=s.logprobs[:, None], rewards=rewards, dones=dones,
                           success=torch.tensor([True, False, False, False]), task=task,
                           version=version)


def test_lora_trains_its_adapters_against_the_base_and_sends_only_them(tmp_path):
    from wmrl.policies.openvla_oft import build_policy
    from wmrl.weights.lora import is_adapter_key, merged_state_dict

    module = make_module(LORA_POLICY, lr=1e-2, kl_coef=0.1)
    assert module.reference_policy is None  # the base is the policy with its adapters off
    adapters = {k for k in module.policy.state_dict() if is_adapter_key(k)}
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    data = RecordedSyncs([policy_batch()])
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(module, datamodule=data)
    opt = module.optimizers().optimizer
    assert sum(len(g["params"]) for g in opt.param_groups) == len(adapters)
    after = module.policy.state_dict()
    moved = {k for k in after if not torch.equal(after[k], before[k])}
    assert moved and moved <= adapters  # the base never changes
    # the KL term's reference: exactly the base policy's log-probs
    b = policy_batch()
    obs = {"image": b.image[:, 0], "task": b.task}
    assert torch.equal(module._reference_log_probs(obs, b.tokens[:, 0]),
                       build_policy().log_probs(obs, b.tokens[:, 0], 1.0))
    assert module.last_metrics["train/ref_kl"] > 0  # random B: the policy is not the base
    # every sync (versions 0 and 1) sent the adapters alone: 3% of the merged policy's bytes
    assert [set(s) for s in data.sent] == [adapters, adapters]
    sent = sum(v.numel() * v.element_size() for v in data.sent[-1].values())
    merged = sum(v.numel() * v.element_size() for v in merged_state_dict(module.policy).values())
    assert sent == 4 * sum(after[k].numel() for k in adapters) and sent / merged < 0.1
    # the checkpoint holds the adapters (and the config export needs) ...
    ckpt = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(ckpt)
    assert set(ckpt["state_dict"]) == {f"policy.{k}" for k in adapters}
    assert json.loads(ckpt["lora_config"])["r"] == 4
    # ... which a module rebuilt from the config takes (the base from its spec) ...
    fresh = make_module(LORA_POLICY, lr=1e-2, kl_coef=0.1)
    assert not fresh.strict_loading
    fresh.on_load_checkpoint(ckpt)
    fresh.load_state_dict(ckpt["state_dict"], strict=False)
    assert all(torch.equal(v, after[k]) for k, v in fresh.policy.state_dict().items())
    # ... and one without them is refused by name
    del ckpt["state_dict"][f"policy.{sorted(adapters)[0]}"]
    with pytest.raises(ConfigError, match="holds no policy.*lora_"):
        make_module(LORA_POLICY).on_load_checkpoint(ckpt)


def test_lora_resume_is_exact(tmp_path):
    """Two steps straight, and one step + checkpoint + a resumed second step: the same
    adapters and AdamW state, bit for bit."""
    def trainer(steps, root):
        return L.Trainer(accelerator="cpu", max_steps=steps, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root)

    straight = make_module(LORA_POLICY, lr=1e-2, kl_coef=0.1)
    trainer(2, tmp_path / "a").fit(straight, datamodule=GivenRollouts(
        [policy_batch(0), policy_batch(1, seed=1)]))
    half = make_module(LORA_POLICY, lr=1e-2, kl_coef=0.1)
    t = trainer(1, tmp_path / "b")
    t.fit(half, datamodule=GivenRollouts([policy_batch(0)]))
    t.save_checkpoint(tmp_path / "b" / "last.ckpt")
    saved = torch.load(tmp_path / "b" / "last.ckpt", weights_only=True)
    assert all(".lora_" in k for k in saved["state_dict"])  # kilobytes, not the base
    resumed = make_module(LORA_POLICY, lr=1e-2, kl_coef=0.1)
    trainer(2, tmp_path / "b").fit(resumed, datamodule=GivenRollouts([policy_batch(1, seed=1)]),
                                   ckpt_path=str(tmp_path / "b" / "last.ckpt"))
    a, b = straight.policy.state_dict(), resumed.policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = straight.optimizers().optimizer.state_dict()["state"]
    sb = resumed.optimizers().optimizer.state_dict()["state"]
    assert sa.keys() == sb.keys() and all(torch.equal(sa[i]["exp_avg"], sb[i]["exp_avg"])
                                          for i in sa)


# ---- precision of the optimizer (algorithm.optimizer_dtype) -----------------------------
def test_bf16_adamw_rounds_most_updates_away_and_float32_master_weights_keep_them(tmp_path):
    """WoVR's lr 2e-5, 3 steps. AdamW's first steps move a weight by about lr; a bf16 weight of
    scale 0.02 has a spacing of 2^-14 ~ 6e-5 to 1.2e-4 there, so a 2e-5 step rounds back to the
    same value: most Llama weights never change. The documented setting - float32 weights
    (the master copy), computing in bf16 (trainer.precision=bf16-mixed) - changes them all."""
    from wmrl.policies.openvla_oft import build_policy

    def unchanged(dtype, precision):
        policy = {"_target_": "wmrl.policies.openvla_oft.build_policy", "dtype": dtype}
        module = make_module(policy, lr=2e-5, weight_decay=0.0, optimizer_dtype=dtype,
                             global_batch=4, micro_batch=4)
        before = {k: v.clone() for k, v in module.policy.state_dict().items()
                  if ".layers." in k and k.endswith("proj.weight")}
        trainer = L.Trainer(accelerator="cpu", max_steps=3, logger=False, precision=precision,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=tmp_path)
        trainer.fit(module, datamodule=GivenRollouts([policy_batch(v) for v in range(3)]))
        after = module.policy.state_dict()
        same = sum(int((after[k] == v).sum()) for k, v in before.items())
        return same / sum(v.numel() for v in before.values())

    assert 0.015 < build_policy().language_model.model.layers[0].mlp.up_proj.weight.std() < 0.025
    bf16 = unchanged("bfloat16", "bf16-true")
    master = unchanged("float32", "bf16-mixed")
    print(f"unchanged after 3 steps: bf16 {bf16:.3f}, float32 master {master:.5f}")
    assert bf16 > 0.5 and master < 0.01, (bf16, master)


def test_a_16_bit_policy_needs_the_optimizer_dtype_chosen_knowingly():
    bf16 = {"_target_": "wmrl.policies.openvla_oft.build_policy", "dtype": "bfloat16"}
    with pytest.raises(ConfigError, match=r"optimizer_dtype=float32 but the trained policy "
                                          r"parameters are bfloat16: .* policy.dtype=float32"):
        make_module(bf16)
    make_module(bf16, optimizer_dtype="bfloat16")  # the knowing choice
    # LoRA on a bf16 base: the adapters are float32, so float32 AdamW is the default
    module = make_module({**bf16, "lora": {"rank": 4}})
    dtypes = {str(p.dtype) for p in module.policy.parameters() if p.requires_grad}
    assert dtypes == {"torch.float32"}
    assert module.policy.language_model.lm_head.base_layer.weight.dtype == torch.bfloat16
