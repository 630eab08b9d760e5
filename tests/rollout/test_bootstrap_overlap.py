"""Bootstrap overlap (``rollout.overlap_resets``): the next step's env resets run on the env
actors while the trainer updates, and the batches are bit-identical to resetting in the step."""

import time

import pytest
import ray
import torch

from wmrl.rollout.datamodule import RolloutDataModule
from wmrl.rollout.engine import reset_seed

pytestmark = pytest.mark.slow

STEPS = 3
UPDATE_S = 0.3  # the "trainer update" between two batches
# trace stamps are wall clock via an offset each process measures once (a loaded core may
# delay it by some ms): a reset counts as made during the update if it ended this long
# before rollout was called; the exact check is step_timing's reset_ahead_s (time.time())
SLACK = UPDATE_S / 2
FIELDS = ("image", "tokens", "logprobs", "rewards", "dones", "success")


def make_dm(placement, stages, overlap, **over):
    kw = dict(policy={"_target_": "toys.LinearBinPolicy"},
              env={"_target_": "toys.ReachEnv", "tolerance": 0.52},
              num_envs=16, group_size=4, rollout_epochs=2, max_episode_steps=24, chunk=8,
              temperature=1.0, placement=placement, pipeline_stages=stages,
              num_env_workers=2, num_rollout_workers=1, worker_cpus=0.25, seed=3,
              overlap_resets=overlap, tracing=True)
    return RolloutDataModule(**{**kw, **over})


def weights(version):
    """The trainer's weights after ``version`` updates (a different policy every step)."""
    from toys import LinearBinPolicy

    sd = LinearBinPolicy().state_dict()
    g = torch.Generator().manual_seed(version)
    sd["bias"] = torch.randn(sd["bias"].shape, generator=g)
    return sd


def env_resets(events):
    """(stage, start, end) in wall-clock seconds of every env.reset span."""
    return [(e["args"]["stage"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
            for e in events if e.get("ph") == "X" and e["name"] == "env.reset"]


def drive(dm, steps=STEPS, first=0, between=None):
    """Batches of ``steps`` training steps: rollout, "update" (sleep), weight sync; per step
    also when rollout was called and the env.reset spans it brought back."""
    out = []
    dm.sync_weights(weights(first), first)
    for k in range(first, first + steps):
        called = time.time()
        batch = dm.rollout()
        out.append((batch, called, env_resets(dm.pop_trace_events()), dm.step_timing()))
        time.sleep(UPDATE_S)
        dm.sync_weights(weights(k + 1), k + 1)
        if between is not None:
            between(dm, k)
    return out


def run(placement, stages, overlap, **kw):
    dm = make_dm(placement, stages, overlap)
    dm.setup("fit")
    try:
        assert dm.overlapping == overlap
        return drive(dm, **kw)
    finally:
        dm.teardown()


def assert_same(a, b):
    for k, (x, y) in enumerate(zip(a, b)):
        assert x.version == y.version
        for name in FIELDS:
            assert torch.equal(getattr(x, name), getattr(y, name)), (k, name)


@pytest.mark.parametrize("placement,stages", [("disaggregated", 1), ("disaggregated", 2),
                                              ("hybrid", 2), ("collocated", 2)])
def test_overlap_gives_the_same_batches_and_resets_during_the_update(ray_local, placement,
                                                                     stages):
    plain = run(placement, stages, overlap=False)
    ahead = run(placement, stages, overlap=True)
    assert [b.version for b, *_ in ahead] == list(range(STEPS))
    assert_same([b for b, *_ in plain], [b for b, *_ in ahead])
    assert 0 < plain[0][0].success.float().mean() < 1  # the policy matters
    # two epochs x 2 env actors x stages resets per step; without overlap all inside the step
    per_step = 2 * 2 * stages
    for _, called, resets, timing in plain:
        assert len(resets) == per_step and all(t0 > called - SLACK for _, t0, _ in resets)
        assert timing["reset_ahead_s"] == 0.0
    # with overlap: step 0 resets itself; later steps' epoch-0 resets (one per env actor and
    # stage) ran and ended before rollout was called, during the previous "update"
    _, called, resets, timing = ahead[0]
    assert all(t0 > called - SLACK for _, t0, _ in resets) and timing["reset_ahead_s"] == 0.0
    for k, (_, called, resets, timing) in enumerate(ahead[1:], 1):
        early = [r for r in resets if r[2] < called - SLACK]
        assert len(resets) == per_step and len(early) == 2 * stages, k
        assert all(r[1] > called - SLACK for r in resets if r not in early)
        assert sorted(s for s, *_ in early) == sorted(list(range(stages)) * 2)
        assert timing["reset_ahead_s"] > 0


def test_collocated_on_an_accelerator_does_not_overlap(ray_local):
    dm = make_dm("collocated", 1, True)
    # as the actors would report it on a card (they compute on the CPU here)
    dm.pool.placement_report = lambda: [{"compute_device": "cuda:0"}]
    dm.setup("fit")
    try:
        assert dm.overlap_resets and not dm.overlapping
        out = drive(dm, steps=2)
        assert dm._resets_ahead is None
        for _, called, resets, timing in out:
            assert all(t0 > called - SLACK for _, t0, _ in resets)
            assert timing["reset_ahead_s"] == 0
    finally:
        dm.teardown()


def test_resume_and_a_restarted_env_actor_reset_again(ray_local, caplog):
    """Nothing of the resets started ahead is checkpointed: a run resumed at step 1 makes the
    same batches; an env actor that Ray restarted during the update lost its reset, which is
    made again (same batch)."""
    plain = [b for b, *_ in run("disaggregated", 2, overlap=False)]
    resumed = make_dm("disaggregated", 2, True)
    resumed.setup("fit")
    try:
        resumed.load_state_dict({"rollout_step": 1})

        def kill_env_actor(dm, k):
            if k != 1:
                return
            seed, refs = dm._resets_ahead
            ray.wait(list(refs.values()), num_returns=len(refs), fetch_local=False)
            actor = dm.plan.env_actors[1]
            assert ray.get(actor.holds_reset.remote(0, reset_seed(seed, 0, 1, 0)))
            ray.kill(actor, no_restart=False)  # Ray restarts it (max_actor_restarts)
            deadline = time.monotonic() + 60
            while True:  # until the new process answers (ray.kill does not wait)
                try:
                    if not ray.get(actor.holds_reset.remote(0, reset_seed(seed, 0, 1, 0)),
                                   timeout=10):
                        break
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.2)

        out = drive(resumed, steps=2, first=1, between=kill_env_actor)
        assert resumed.actor_restarts == 0  # nothing to recover: only the reset was lost
    finally:
        resumed.teardown()
    assert "no longer holds the reset started ahead" in caplog.text
    _, called, resets, timing = out[0]  # the first step after the resume resets itself
    assert all(t0 > called - SLACK for _, t0, _ in resets) and timing["reset_ahead_s"] == 0.0
    for k, (batch, *_) in enumerate(out, 1):
        assert batch.version == k
        for name in FIELDS:
            assert torch.equal(getattr(batch, name), getattr(plain[k], name)), (k, name)
