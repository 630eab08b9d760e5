"""Shared plumbing for reward models: lazy build, device moves, offload, pickling.

A reward object is built from plain, picklable arguments on the driver (cheap: no weights
are loaded) and shipped to a Ray worker; the model is built on the first call there. The
built model is never pickled: ``__getstate__`` drops it, so a copy rebuilds it from the same
arguments (random init is seeded, so every copy of an uncheckpointed model is identical).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class LazyRewardModel:
    """Base for reward models: subclasses implement ``_build() -> nn.Module`` and ``__call__``.

    ``to(device)`` sets the execution device (and moves a built model); ``offload()`` parks the
    weights on CPU and ``onload()`` brings them back; a call on an offloaded model onloads it
    first, so the env never scores on the wrong device by accident.
    """

    stateful = False  # True: keeps per-env history across calls (a call is not repeatable)

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self._model: nn.Module | None = None
        self._offloaded = False

    # -- to implement -------------------------------------------------------------------
    def _build(self) -> nn.Module:
        raise NotImplementedError

    # -- lazy model ---------------------------------------------------------------------
    @property
    def model(self) -> nn.Module:
        """The underlying module, built (and moved to ``self.device``) on first access."""
        if self._model is None:
            model = self._build()
            model.eval().requires_grad_(False)
            self._model = model.to(self.device)
            self._offloaded = False
        elif self._offloaded:
            self.onload()
        return self._model

    @property
    def is_built(self) -> bool:
        return self._model is not None

    def to(self, device: str | torch.device) -> LazyRewardModel:
        self.device = torch.device(device)
        if self._model is not None:
            self._model.to(self.device)
            self._offloaded = False
        return self

    def offload(self) -> None:
        """Move the weights to CPU (frees accelerator memory while another role runs)."""
        if self._model is not None and not self._offloaded:
            self._model.to("cpu")
            self._offloaded = self.device.type != "cpu"
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def onload(self) -> None:
        """Move the weights back to ``self.device`` after ``offload()``."""
        if self._model is not None and self._offloaded:
            self._model.to(self.device)
        self._offloaded = False

    def reset(self, env_ids=None) -> None:
        """Forget per-env state of restarted envs; stateless rewards have none (no-op), so the
        env can call ``reward.reset(env_ids)`` on every reward model alike."""

    # -- pickling: ship the arguments, not the weights -----------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_model"] = None
        state["_offloaded"] = False
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def seeded_init(build, seed: int):
    """Call ``build()`` with the global torch RNG forked and seeded, so random init is
    reproducible across processes without disturbing the caller's RNG stream."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()
