"""The plans tests/plan shares: the real-size config (``wmrl/plan/compose.py``) with a test's
overrides, planned once per session (the meta modules and traces are cached in-process)."""

import pytest

from wmrl.plan.compose import compose
from wmrl.plan.memory import PlanOptions, make_plan

FAST = PlanOptions(sweep_envs=())


@pytest.fixture(scope="session")
def plan_for():
    """``plan_for(*overrides, options=FAST)``: the plan of the real-size config + overrides."""
    def plan(*overrides, options=FAST):
        return make_plan(compose(list(overrides)), options)
    return plan


@pytest.fixture(scope="session")
def default_plan(plan_for):
    """``python scripts/plan.py +plan.sweep_envs=[8,64]``."""
    return plan_for(options=PlanOptions(sweep_envs=(8, 64)))
