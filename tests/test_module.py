"""``GRPOModule.update`` on a hand-made batch, under a real Lightning Trainer, without Ray."""

import math
import warnings

import lightning as L
import torch

from wmrl.interfaces import TrajectoryBatch
from wmrl.module import GRPOModule

warnings.filterwarnings("ignore", message=".*dataloader_iter.*")


def hand_batch() -> TrajectoryBatch:
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
        task=["reach"] * n, version=0)


def test_update_moves_logits_towards_the_success_and_skips_flat_groups(tmp_path):
    module = GRPOModule(policy={"_target_": "toys.LinearBinPolicy"}, group_size=2,
                        temperature=1.0, lr=0.1, eps=1e-8, weight_decay=0.0, grad_clip=1.0,
                        global_batch=8, micro_batch=2)
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)
    trainer.fit(module, train_dataloaders=iter([hand_batch()]))
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
