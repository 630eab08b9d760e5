"""``GivenRollouts``: a ``RolloutSource`` without Ray that hands ``GRPOModule`` batches made
beforehand: the tests' hand-made batches, and the full-size check's one GRPO update
(``scripts/full_size_check.py``). Not imported by ``wmrl.rollout``: it needs Lightning,
which the modules Ray actors import leave out."""

from __future__ import annotations

import itertools

import lightning as L
import torch

from wmrl.interfaces import TrajectoryBatch


class GivenRollouts(L.LightningDataModule):
    """A ``RolloutSource`` without Ray: ``rollout`` hands out the given trajectory batches in
    turn (``per_rank``: rank r always gets ``batches[r]``, as ``TrajectoryBatch`` kwargs) and
    ``sync_weights`` records the versions pushed - for testing ``GRPOModule``'s step on
    batches made beforehand."""

    placement = "disaggregated"

    def __init__(self, batches: list, per_rank: bool = False):
        super().__init__()
        self.batches, self.per_rank = list(batches), per_rank
        self.synced: list[int] = []

    def train_dataloader(self):
        return itertools.count()

    def rollout(self, weights=None) -> TrajectoryBatch:
        if self.per_rank:
            dist = torch.distributed
            return TrajectoryBatch(**self.batches[dist.get_rank() if dist.is_initialized() else 0])
        return self.batches.pop(0)

    def sync_weights(self, state_dict, version: int) -> float:
        self.synced.append(version)
        return 0.0

    def shares_trainer_device(self) -> bool:
        return False

    def step_timing(self) -> dict:
        return {}

    def pop_trace_events(self) -> list:
        return []
