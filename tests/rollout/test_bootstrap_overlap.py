"""Bootstrap overlap (``rollout.overlap_resets``): the next step's env resets run on the env
actors while the trainer updates, and the batches are bit-identical to resetting in the step;
and the placements give identical trajectories.

A Ray actor takes seconds to start, a step here milliseconds: so one DataModule per code path
is started once and driven through every scenario (the module fixture ``runs``, both
DataModules at once), and the tests check what they recorded. The paths: ``collocated`` (env and policy in one actor) and
``disaggregated`` (separate env and policy actors), both with 2 pipeline stages. ``hybrid``
is ``disaggregated`` with other resource requests (the same ``ActorPool`` and engine path:
tests/rollout/test_placement.py places it and rolls out on it); one stage is the same loop
(the toy fits run it: tests/rollout/test_actor_restart.py, tests/test_fit_toy.py).

Overlap on or off is decided in ``RolloutDataModule.start`` from ``overlap_resets`` and where
the actors compute; ``decide_again`` re-runs that decision on the actors already started (as
a run started with that setting would decide), so one set of actors makes both runs: the
steps without overlap, then the same steps again (same seeds, same weights; the versions
continue upwards, as a receiver refuses older ones) with it.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor

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
STAGES = 2
AHEAD, RESUMED = 10, 20  # version offsets of the second and third run on the same actors
CARD = [{"compute_device": "cuda:0"}]  # as collocated actors on a card would report it


def make_dm(placement, overlap, **over):
    kw = dict(policy={"_target_": "toys.LinearBinPolicy"},
              env={"_target_": "toys.ReachEnv", "tolerance": 0.52},
              num_envs=16, group_size=4, rollout_epochs=2, max_episode_steps=24, chunk=8,
              temperature=1.0, placement=placement, pipeline_stages=STAGES,
              num_env_workers=2, num_rollout_workers=1, worker_cpus=0.25, seed=3,
              overlap_resets=overlap, tracing=True)
    return RolloutDataModule(**{**kw, **over})


def weights(step):
    """The trainer's weights after ``step`` updates (a different policy every step)."""
    from toys import LinearBinPolicy

    sd = LinearBinPolicy().state_dict()
    g = torch.Generator().manual_seed(step)
    sd["bias"] = torch.randn(sd["bias"].shape, generator=g)
    return sd


def env_resets(events):
    """(stage, start, end) in wall-clock seconds of every env.reset span."""
    return [(e["args"]["stage"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6)
            for e in events if e.get("ph") == "X" and e["name"] == "env.reset"]


def drive(dm, steps=STEPS, first=0, offset=0, between=None):
    """Batches of ``steps`` training steps from step ``first``: rollout, "update" (sleep),
    weight sync (``weights(k)`` as version ``offset + k``); per step also when rollout was
    called and the env.reset spans it brought back."""
    out = []
    dm.sync_weights(weights(first), offset + first)
    for k in range(first, first + steps):
        called = time.time()
        batch = dm.rollout()
        out.append((batch, called, env_resets(dm.pop_trace_events()), dm.step_timing()))
        time.sleep(UPDATE_S)
        dm.sync_weights(weights(k + 1), offset + k + 1)
        if between is not None:
            between(dm, k)
    return out


def decide_again(dm, overlap):
    """``RolloutDataModule.start`` for a run asking for ``overlap``, on the actors it
    already started (the pool is not started again)."""
    dm.overlap_resets = overlap
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dm.pool, "start", lambda *a, **k: None)
        dm.start()


def drain(dm):
    """The resets started ahead for a step that is not made: let them finish and drop their
    records (else the next run's first step would count them as its own)."""
    ray.get([a.pop_step_record.remote() for a in dm.layout.actors])
    dm.pop_trace_events()


def decision(dm):
    return dm.overlap_resets, dm.overlapping, dm.shares_trainer_device()


def run_collocated():
    """Collocated actors, first as on an accelerator (no overlap: the plain run), then on the
    CPU they are on (overlap)."""
    dm = make_dm("collocated", True)
    dm.pool.placement_report = lambda: CARD  # as the actors would report it on a card
    dm.setup("fit")
    try:
        rec = {"on_card": decision(dm)}
        rec["plain"] = drive(dm)
        rec["ahead_left_on_card"] = dm._resets_ahead
        del dm.pool.placement_report  # the actors' own report: compute_device cpu
        decide_again(dm, True)
        rec["on_cpu"] = decision(dm)
        dm.load_state_dict({"rollout_step": 0})  # the same steps again
        rec["ahead"] = drive(dm, offset=AHEAD)
        return rec
    finally:
        dm.teardown()


def run_disaggregated():
    """Separate env and policy actors: a run without overlap, the same steps with it, then a
    run resumed at step 1 during which Ray restarts an env actor."""
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda r: warnings.append(r.getMessage())
    logger = logging.getLogger("wmrl.rollout.datamodule")
    logger.addHandler(handler)
    dm = make_dm("disaggregated", False)
    dm.setup("fit")
    try:
        rec = {"off": decision(dm)}
        rec["plain"] = drive(dm)
        decide_again(dm, True)
        rec["on"] = decision(dm)
        dm.load_state_dict({"rollout_step": 0})
        rec["ahead"] = drive(dm, offset=AHEAD)
        drain(dm)
        # resumed at step 1: a checkpoint holds only rollout_step (no reset started ahead)
        rec["state"] = dm.state_dict()
        dm.load_state_dict({"rollout_step": 1})
        rec["ahead_after_load"] = dm._resets_ahead

        def kill_env_actor(dm, k):
            if k != 1:
                return
            seed, refs = dm._resets_ahead
            ray.wait(list(refs.values()), num_returns=len(refs), fetch_local=False)
            actor = dm.layout.env_actors[1]
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

        rec["resumed"] = drive(dm, steps=2, first=1, offset=RESUMED, between=kill_env_actor)
        rec["restarts"] = dm.actor_restarts
        rec["warnings"] = warnings
        return rec
    finally:
        dm.teardown()
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def runs(ray_local):
    """Both at once: their actors' starts share the CPUs, their steps the waits."""
    with ThreadPoolExecutor(2) as pool:
        collocated, disaggregated = pool.submit(run_collocated), pool.submit(run_disaggregated)
        return {"collocated": collocated.result(), "disaggregated": disaggregated.result()}


@pytest.fixture
def collocated(runs):
    return runs["collocated"]


@pytest.fixture
def disaggregated(runs):
    return runs["disaggregated"]


def assert_same(a, b, offset=0):
    for k, (x, y) in enumerate(zip(a, b)):
        assert y.version == x.version + offset
        for name in FIELDS:
            assert torch.equal(getattr(x, name), getattr(y, name)), (k, name)


def assert_reset_in_step(step):
    _, called, resets, timing = step
    assert all(t0 > called - SLACK for _, t0, _ in resets) and timing["reset_ahead_s"] == 0.0


@pytest.mark.parametrize("placement", ["collocated", "disaggregated"])
def test_overlap_gives_the_same_batches_and_resets_during_the_update(runs, placement):
    rec = runs[placement]
    plain, ahead = rec["plain"], rec["ahead"]
    assert [b.version for b, *_ in plain] == list(range(STEPS))
    assert [b.version for b, *_ in ahead] == [AHEAD + k for k in range(STEPS)]
    assert_same([b for b, *_ in plain], [b for b, *_ in ahead], offset=AHEAD)
    assert 0 < plain[0][0].success.float().mean() < 1  # the policy matters
    # two epochs x 2 env actors x stages resets per step; without overlap all inside the step
    per_step = 2 * 2 * STAGES
    for step in plain:
        assert len(step[2]) == per_step
        assert_reset_in_step(step)
    # with overlap: step 0 resets itself; later steps' epoch-0 resets (one per env actor and
    # stage) ran and ended before rollout was called, during the previous "update"
    assert_reset_in_step(ahead[0])
    for k, (_, called, resets, timing) in enumerate(ahead[1:], 1):
        early = [r for r in resets if r[2] < called - SLACK]
        assert len(resets) == per_step and len(early) == 2 * STAGES, k
        assert all(r[1] > called - SLACK for r in resets if r not in early)
        assert sorted(s for s, *_ in early) == sorted(list(range(STAGES)) * 2)
        assert timing["reset_ahead_s"] > 0


def test_overlap_is_decided_by_the_setting_and_where_the_actors_compute(collocated,
                                                                        disaggregated):
    # (overlap_resets, overlapping, shares_trainer_device)
    assert disaggregated["off"] == (False, False, False)
    assert disaggregated["on"] == (True, True, False)
    assert collocated["on_cpu"] == (True, True, False)  # collocated on the CPU overlaps too


def test_collocated_on_an_accelerator_does_not_overlap(collocated):
    assert collocated["on_card"] == (True, False, True)  # asked for, not done
    assert collocated["ahead_left_on_card"] is None
    for step in collocated["plain"]:  # every reset inside its step
        assert_reset_in_step(step)


def test_resume_and_a_restarted_env_actor_reset_again(disaggregated):
    """Nothing of the resets started ahead is checkpointed: a run resumed at step 1 makes the
    same batches; an env actor that Ray restarted during the update lost its reset, which is
    made again (same batch)."""
    rec = disaggregated
    assert rec["state"] == {"rollout_step": STEPS} and rec["ahead_after_load"] is None
    assert rec["restarts"] == 0  # nothing to recover: only the reset was lost
    assert any("no longer holds the reset started ahead" in w for w in rec["warnings"])
    out, plain = rec["resumed"], [b for b, *_ in rec["plain"]]
    assert_reset_in_step(out[0])  # the first step after the resume resets itself
    for k, (batch, *_) in enumerate(out, 1):
        assert batch.version == RESUMED + k
        for name in FIELDS:
            assert torch.equal(getattr(batch, name), getattr(plain[k], name)), (k, name)


def test_placements_give_identical_trajectories(collocated, disaggregated):
    """The same steps on collocated and on separate env and policy actors: the same batches
    (with and without overlap), of the engine's layout."""
    for run in ("plain", "ahead"):
        assert_same([b for b, *_ in collocated[run]], [b for b, *_ in disaggregated[run]])
    ref = collocated["plain"][0][0]
    n = 2 * 16
    assert ref.tokens.shape == (n, 3, 56) and ref.image.shape == (n, 3, 8, 8, 3)
    assert ref.rewards.shape == (n, 24) and ref.version == 0
    assert 0 < ref.success.float().mean() < 1
    for rec in (collocated, disaggregated):
        for *_, timing in rec["plain"] + rec["ahead"]:
            assert timing["rollout_s"] > 0 and timing["env_s"] > 0 and timing["policy_s"] > 0
            assert timing["reward_s"] == 0.0  # the toy env has no reward model
