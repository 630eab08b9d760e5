"""A rollout actor whose process dies mid-step is restarted by Ray, re-synced, and the step
re-run from its seed: the run ends with the weights of an undisturbed run."""

import pytest
import torch
from test_fit_toy import toy_cfg

from wmrl.fit import fit

pytestmark = pytest.mark.slow


def _fit(tmp_path, env, **over):
    cfg = toy_cfg(tmp_path, **{"trainer.max_steps": 4, "logger": None, **over})
    cfg.env = env
    return fit(cfg)


def test_dead_env_actor_is_replaced_and_the_step_rerun(tmp_path, ray_local):
    _, calm = _fit(tmp_path / "calm", {"_target_": "toys.ReachEnv", "tolerance": 0.5})
    marker = str(tmp_path / "crashed")
    # 2 chunks a step: the 5th chunk_step is step 3's first; one of the 2 env actors dies
    trainer, hit = _fit(tmp_path / "hit", {"_target_": "toys.CrashingReachEnv",
                                           "tolerance": 0.5, "crash_at": 5, "marker": marker})
    dm = trainer.datamodule
    assert dm.actor_restarts == 1 and trainer.global_step == 4
    assert [h["rollout/success"] for h in hit.history] == \
        [h["rollout/success"] for h in calm.history]
    for name, value in calm.policy.state_dict().items():
        assert torch.equal(hit.policy.state_dict()[name], value), name


def test_an_actor_that_keeps_dying_ends_the_run_naming_it(tmp_path, ray_local):
    with pytest.raises(RuntimeError, match=r"died 2 times \(rollout.max_actor_restarts=1\).*"
                                           r"actor env-[01] died"):
        _fit(tmp_path, {"_target_": "toys.CrashingReachEnv", "crash_at": 1},
             **{"rollout.max_actor_restarts": 1})


def test_a_restarted_env_actor_gets_the_pushed_world_model_back(tmp_path, ray_local):
    """PACE pushed world model v5; an env actor dies mid-step: Ray's new process is built
    from the config (v0), and the DataModule loads v5 into it before the step is re-run."""
    import lightning as L

    class PushThenProbe(L.Callback):
        def on_train_start(self, trainer, pl_module):
            trainer.datamodule.sync_world_model({"w": torch.ones(3)}, version=5)
            self.before = trainer.datamodule.world_model_versions()

        def on_train_end(self, trainer, pl_module):
            self.after = trainer.datamodule.world_model_versions()  # 0 in a fresh process

    probe = PushThenProbe()
    cfg = toy_cfg(tmp_path, **{"trainer.max_steps": 2, "logger": None})
    # 2 chunks a step: the 3rd chunk_step is step 2's first
    cfg.env = {"_target_": "toys.CrashingReachEnv", "tolerance": 0.5, "crash_at": 3,
               "marker": str(tmp_path / "crashed")}
    trainer, _ = fit(cfg, extra_callbacks=[probe])
    assert trainer.datamodule.actor_restarts == 1
    assert probe.before == [5, 5] and probe.after == [5, 5]
