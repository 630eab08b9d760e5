"""A rollout actor whose process dies mid-step is restarted by Ray, re-synced (policy weights
and the world model PACE pushed), and the step re-run from its seed: the run ends with the
weights of an undisturbed run.

Every actor start costs seconds (a new process importing torch): the fits run
one env actor and one policy actor (the restart path does not depend on how many there are),
and one crashing fit checks both the re-run step and the world model given back."""

import lightning as L
import pytest
import torch
from test_fit_toy import toy_cfg

from wmrl.fit import fit

pytestmark = pytest.mark.slow


def _fit(tmp_path, env, callbacks=(), **over):
    cfg = toy_cfg(tmp_path, **{"trainer.max_steps": 4, "logger": None,
                               "rollout.placement": "disaggregated",
                               "rollout.num_env_workers": 1, **over})
    cfg.env = env
    return fit(cfg, extra_callbacks=list(callbacks))


class PushThenProbe(L.Callback):
    """PACE's push, by hand: world model v5 to the env actors at the start; their versions
    before the first step and at the end."""

    def on_train_start(self, trainer, pl_module):
        trainer.datamodule.sync_world_model({"w": torch.ones(3)}, version=5)
        self.before = trainer.datamodule.world_model_versions()

    def on_train_end(self, trainer, pl_module):
        self.after = trainer.datamodule.world_model_versions()  # 0 in a fresh process


@pytest.fixture(scope="module")
def calm_and_hit(tmp_path_factory, ray_local):
    """The same 4-step fit twice, with PACE's push: undisturbed, and with the env actor
    dying in the 5th chunk_step (2 chunks a step: step 3's first)."""
    tmp = tmp_path_factory.mktemp("restart")
    calm_probe, hit_probe = PushThenProbe(), PushThenProbe()
    _, calm = _fit(tmp / "calm", {"_target_": "toys.LearnedReachEnv", "tolerance": 0.5},
                   [calm_probe])
    trainer, hit = _fit(tmp / "hit", {"_target_": "toys.CrashingReachEnv", "tolerance": 0.5,
                                      "crash_at": 5, "marker": str(tmp / "crashed")},
                        [hit_probe])
    return calm, calm_probe, trainer, hit, hit_probe


def test_dead_env_actor_is_replaced_and_the_step_rerun(calm_and_hit):
    calm, _, trainer, hit, _ = calm_and_hit
    assert trainer.datamodule.actor_restarts == 1 and trainer.global_step == 4
    assert [h["rollout/success"] for h in hit.history] == \
        [h["rollout/success"] for h in calm.history]
    for name, value in calm.policy.state_dict().items():
        assert torch.equal(hit.policy.state_dict()[name], value), name


def test_a_restarted_env_actor_gets_the_pushed_world_model_back(calm_and_hit):
    """PACE pushed world model v5; the env actor dies mid-step: Ray's new process is built
    from the config (v0), and the DataModule loads v5 into it before the step is re-run."""
    _, calm_probe, trainer, _, hit_probe = calm_and_hit
    assert trainer.datamodule.actor_restarts == 1
    assert calm_probe.before == calm_probe.after == [5]
    assert hit_probe.before == [5] and hit_probe.after == [5]


def test_an_actor_that_keeps_dying_ends_the_run_naming_it(tmp_path, ray_local):
    with pytest.raises(RuntimeError, match=r"died 2 times \(rollout.max_actor_restarts=1\).*"
                                           r"actor env-0 died"):
        _fit(tmp_path, {"_target_": "toys.CrashingReachEnv", "crash_at": 1},
             **{"rollout.max_actor_restarts": 1})
