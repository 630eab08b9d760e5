"""The runtime's parts satisfy the declared contracts (``wmrl/interfaces.py``) that the
callbacks rely on, and a part without them is told apart."""

import lightning as L

from wmrl.interfaces import PolicyTrainer, RolloutSource
from wmrl.module import GRPOModule
from wmrl.rollout.datamodule import RolloutDataModule


def test_module_and_datamodule_are_what_the_callbacks_expect():
    module = GRPOModule(policy={"_target_": "toys.LinearBinPolicy"}, group_size=2,
                        temperature=1.0)
    assert isinstance(module, PolicyTrainer) and module.last_metrics == {}
    module.history.append({"rollout/success": 0.5})
    assert module.last_metrics == {"rollout/success": 0.5}
    dm = RolloutDataModule(policy={"_target_": "toys.LinearBinPolicy"},
                           env={"_target_": "toys.ReachEnv"}, num_envs=4, group_size=2,
                           max_episode_steps=16)
    assert isinstance(dm, RolloutSource) and dm.placement == "disaggregated"
    assert dm.step_timing() == {} and dm.pop_trace_events() == []
    dm._trace_events.append({"name": "x"})
    assert dm.pop_trace_events() == [{"name": "x"}] and dm.pop_trace_events() == []
    # a plain LightningModule / DataModule is neither (the callbacks then do nothing)
    assert not isinstance(L.LightningModule(), PolicyTrainer)
    assert not isinstance(L.LightningDataModule(), RolloutSource)
