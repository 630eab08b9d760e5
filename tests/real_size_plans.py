"""The real-size plans tests/plan shares: ``conf/experiment/real_size.yaml`` (through
``wmrl.plan.compose``) with a test's overrides. The default one is made once per process; the
meta modules and traces are cached in-process too, so later plans reuse them. (A helper module,
not a tests/plan/conftest.py: ``conftest`` is the root one's name, which tests import.)"""

from __future__ import annotations

import functools

from wmrl.plan.compose import compose
from wmrl.plan.finetune import FinetunePlan, make_finetune_plan
from wmrl.plan.memory import MemoryPlan, PlanOptions, make_plan

FAST = PlanOptions(sweep_envs=())


def plan_for(*overrides: str, options: PlanOptions = FAST) -> MemoryPlan:
    """The plan of the real-size config with ``overrides`` (no env sweep unless asked)."""
    return make_plan(compose(list(overrides)), options)


@functools.cache
def default_plan() -> MemoryPlan:
    """``python scripts/plan.py +plan.sweep_envs=[8,64]``."""
    return plan_for(options=PlanOptions(sweep_envs=(8, 64)))


@functools.cache
def default_finetune_plan() -> FinetunePlan:
    """The world-model fine-tune section of ``python scripts/plan.py``."""
    return make_finetune_plan(compose([]), FAST)
