"""MuJoCo tabletop suite: physics + success predicates, expert, determinism, rendering,
dataset round trip, collection script."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from toys import count_renders, expert_actions

from wmrl.sim import collect
from wmrl.sim.dataset import Episode, TrajectoryDataset, TrajectoryWriter
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.expert import ScriptedExpert
from wmrl.sim.tabletop import (
    BLOCK_HALF,
    INIT_DIM,
    PLATE_TOP,
    STATE_DIM,
    TASK_NAMES,
    TabletopEnv,
    TabletopVecEnv,
    initial_frames,
    initial_states,
    success_from_state,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv(image_size=32, max_episode_steps=64)
    yield e
    e.close()


@pytest.fixture(scope="module")
def free_env():
    """No termination on success: physics keeps running after the predicate holds."""
    e = TabletopEnv(image_size=32, max_episode_steps=1000, terminate_on_success=False)
    yield e
    e.close()


def run_expert(env, expert, task, state_id, seed=0):
    obs, _ = env.reset(options={"task": task, "state_id": state_id})
    expert.reset(1, seed=seed)
    done, info = False, {"success": False}
    while not done:
        obs, _, term, trunc, info = env.step(expert.act(obs)[0])
        done = term or trunc
    return info["success"], env.t


def test_place_predicate_by_setting_state(free_env):
    env = free_env
    env.reset(options={"task": "red_on_plate", "state_id": 0})
    assert not env.success()
    plate = env.plate_pos()
    env.set_block_pose("red", [plate[0], plate[1], PLATE_TOP + BLOCK_HALF])
    assert env.success() and env.success("red_on_plate")
    assert not env.success("blue_on_plate")  # blue was not moved
    # let physics run 10 steps with the gripper open: the block rests on the plate
    for _ in range(10):
        env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
    assert env.success()
    assert abs(env.block_pos("red")[2] - (PLATE_TOP + BLOCK_HALF)) < 0.004
    # 10 cm off the plate centre (plate radius 7 cm) -> not a success
    env.set_block_pose("red", [plate[0] + 0.10, plate[1], BLOCK_HALF])
    assert not env.success()
    # floating above the plate is not "on" it
    env.set_block_pose("red", [plate[0], plate[1], 0.10])
    assert not env.success()


def test_push_predicate(env):
    env.reset(options={"task": "red_left", "state_id": 0})
    assert not env.success()
    y = env.block_pos("red")[1]
    env.set_block_pose("red", [-0.25, y, BLOCK_HALF])
    assert env.success()
    env.set_block_pose("red", [-0.19, y, BLOCK_HALF])  # straddles the zone edge at -0.18
    assert not env.success()


def test_block_falls_under_gravity(free_env):
    env = free_env
    env.reset(options={"task": "red_on_plate", "state_id": 1})
    x, y, _ = env.block_pos("blue")
    env.set_block_pose("blue", [x, y, 0.15])
    for _ in range(10):  # 0.5 s of free fall from 15 cm
        env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
    assert abs(env.block_pos("blue")[2] - BLOCK_HALF) < 0.004


def test_magnet_grasp_lifts_block(free_env):
    env = free_env
    obs, _ = env.reset(options={"task": "blue_on_plate", "state_id": 2})
    env.set_hand_pos(env.block_pos("blue") + [0.01, -0.01, 0.005])  # inside the capture box
    for _ in range(3):  # close on the block
        env.step(np.array([0, 0, 0, 0, 0, 0, 1.0]))
    assert env.held_block() == "blue"
    for _ in range(5):  # lift 5 x 2 cm
        env.step(np.array([0, 0, 1.0, 0, 0, 0, 1.0]))
    assert env.block_pos("blue")[2] > BLOCK_HALF + 0.06
    env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))  # open: released, falls
    assert env.held_block() is None
    for _ in range(10):
        env.step(np.array([0, 0, 0, 0, 0, 0, -1.0]))
    assert abs(env.block_pos("blue")[2] - BLOCK_HALF) < 0.005


@pytest.mark.parametrize("task", TASK_NAMES)
def test_expert_solves_tasks(env, task):
    expert = ScriptedExpert(noise_std=0.0)
    results = [run_expert(env, expert, task, i) for i in range(3)]
    assert all(ok for ok, _ in results), results
    assert all(t < 64 for _, t in results)


def test_noisy_expert_is_worse(env):
    clean, noisy = ScriptedExpert(), ScriptedExpert(noise_std=1.5, hesitate_prob=0.2)
    t_clean = [run_expert(env, clean, "red_on_plate", i)[1] for i in range(3)]
    res = [run_expert(env, noisy, "red_on_plate", i, seed=i) for i in range(3)]
    # heavy noise fails or is at least much slower on every state
    assert all((not ok) or t > tc + 10 for (ok, t), tc in zip(res, t_clean)), (res, t_clean)


def test_slow_expert_takes_longer_and_clips_its_commands(env):
    """speed_range caps every motion command at the episode's speed: top speed 0.5 takes
    about twice the clean expert's steps (the reach is mostly at the cap)."""
    t_fast = [run_expert(env, ScriptedExpert(), "red_of_two", i)[1] for i in range(3)]
    slow = ScriptedExpert(speed_range=(0.5, 0.5))
    obs, _ = env.reset(options={"task": "red_of_two", "state_id": 0})
    slow.reset(1, seed=0)
    assert np.abs(slow.act(obs)[0, :6]).max() == pytest.approx(0.5)
    env.max_episode_steps = 200
    try:
        res = [run_expert(env, slow, "red_of_two", i) for i in range(3)]
    finally:
        env.max_episode_steps = 64
    assert all(ok for ok, _ in res)
    for (_, t), tf in zip(res, t_fast):
        assert 1.5 * tf < t < 2.5 * tf, (res, t_fast)
    with pytest.raises(ValueError, match="speed_range"):
        ScriptedExpert(speed_range=(0.0, 1.0))


def test_slots_layout():
    """red_of_two: blocks in the two slots (x = -0.08 / 0.14, y = -0.05, +-1.5 cm), red on
    either side about half the time, plate and hand near their fixed spots."""
    a = initial_states("red_of_two", 200, seed=0)
    red_x, blue_x = a[:, 0], a[:, 3]
    for x in (red_x, blue_x):
        assert np.all(np.minimum(np.abs(x + 0.08), np.abs(x - 0.14)) <= 0.015)
    assert np.all(np.abs(red_x - blue_x) > 0.19)  # never in the same slot
    assert 80 <= np.sum(red_x < 0.03) <= 120
    assert np.all(np.abs(a[:, [1, 4]] + 0.05) <= 0.015)
    assert np.all(np.abs(a[:, 6:8] - [0.03, 0.10]) <= 0.015)
    assert np.all(np.abs(a[:, 8:11] - [0.03, -0.07, 0.17]) <= 0.015)


def test_initial_states_fixed_and_distinct():
    a = initial_states("red_on_plate", 200, seed=0)
    assert a.shape == (200, INIT_DIM)
    assert np.array_equal(a[:5], initial_states("red_on_plate", 5, seed=0))
    assert len(np.unique(a.round(6), axis=0)) == 200
    assert not np.allclose(a[:5], initial_states("red_on_plate", 5, seed=1))
    assert not np.allclose(a[:5], initial_states("blue_on_plate", 5, seed=0))


def test_reset_deterministic_and_render(env):
    o1, _ = env.reset(options={"task": "blue_on_plate", "state_id": 7})
    env.step(np.full(7, 0.5))
    o2, _ = env.reset(options={"task": "blue_on_plate", "state_id": 7})
    assert o1["image"].shape == (32, 32, 3) and o1["image"].dtype == np.uint8
    assert o1["state"].shape == (STATE_DIM,)
    assert o1["task"] == "put the blue block on the green plate"
    np.testing.assert_array_equal(o1["image"], o2["image"])
    np.testing.assert_array_equal(o1["state"], o2["state"])
    o3, _ = env.reset(options={"task": "blue_on_plate", "state_id": 8})
    assert not np.array_equal(o1["image"], o3["image"])
    # random (non-fixed) initial states are reproducible from the reset seed
    r1, r2 = env.reset(seed=5)[0], env.reset(seed=5)[0]
    np.testing.assert_array_equal(r1["state"], r2["state"])
    assert not np.array_equal(r1["state"], env.reset(seed=6)[0]["state"])
    # moving the red block changes the picture where it was and where it went
    before = env.render().copy()
    env.set_block_pose("red", [-0.25, 0.0, BLOCK_HALF])
    after = env.render()
    assert np.abs(before.astype(int) - after.astype(int)).sum(-1).astype(bool).sum() >= 4


def test_bad_inputs(env):
    with pytest.raises(ValueError, match="unknown task"):
        env.reset(options={"task": "stack the cups"})
    env.reset(options={"task": 0, "state_id": 0})
    with pytest.raises(ValueError, match="7 finite floats"):
        env.step(np.zeros(6))


def test_step_chunk_and_vec_env():
    vec = TabletopVecEnv(2, image_size=24, max_episode_steps=10, skip_intermediate_renders=False)
    obs, info = vec.reset(options=[{"task": "red_left", "state_id": 0},
                                   {"task": "red_on_plate", "state_id": 1}])
    assert obs["image"].shape == (2, 24, 24, 3) and obs["task"][0].startswith("push")
    acts = np.zeros((2, 8, 7))
    acts[..., 2] = 1.0  # move up
    obs, rew, term, trunc, info = vec.step_chunk(acts)
    assert info["frames"].shape == (2, 8, 24, 24, 3) and rew.shape == (2, 8)
    assert not trunc.any() and list(info["n_executed"]) == [8, 8]
    obs, rew, term, trunc, info = vec.step_chunk(acts)  # steps 9..16: truncated at 10
    assert list(info["n_executed"]) == [2, 2]
    assert trunc[:, 1:].all() and not trunc[:, 0].any() and vec.done.all()
    # frames after the end repeat the last frame
    np.testing.assert_array_equal(info["frames"][0, 2], info["frames"][0, -1])
    vec.close()


def test_skip_intermediate_renders_same_results(monkeypatch):
    """Skipping intermediate renders changes nothing a caller gets from step_chunk but the
    missing info["frames"]: bit-identical obs (uint8 frames) and states, rewards, done flags
    and success, for episodes that end by success mid-chunk (env 0), by success on a chunk's
    last step (env 1) and by truncation mid-chunk (env 2); and it renders once per chunk."""
    steps, chunk, n_chunks = 28, 8, 4  # truncation at step 28 = chunk 4, index 3
    acts = np.stack([expert_actions("red_on_plate", 3, 32),  # success at step 23
                     expert_actions("red_on_plate", 1, 32),  # success at step 24
                     np.random.default_rng(0).uniform(-1, 1, (32, 7))])
    calls = count_renders(monkeypatch)
    runs = {}
    for skip in (True, False):
        vec = TabletopVecEnv(3, image_size=32, max_episode_steps=steps,
                             skip_intermediate_renders=skip)
        obs, _ = vec.reset(options=[{"task": "red_on_plate", "state_id": i} for i in (3, 1, 0)])
        calls.clear()
        out = [obs]
        for k in range(n_chunks):
            out.append(vec.step_chunk(acts[:, k * chunk : (k + 1) * chunk]))
            assert ("frames" in out[-1][4]) == (not skip)
        runs[skip] = (out, len(calls))
        vec.close()
    (skip, n_skip), (full, n_full) = runs[True], runs[False]
    np.testing.assert_array_equal(skip[0]["image"], full[0]["image"])
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(skip[1:], full[1:]):
        assert o1["image"].dtype == np.uint8
        np.testing.assert_array_equal(o1["image"], o2["image"])
        np.testing.assert_array_equal(o1["state"], o2["state"])
        for a, b in [(r1, r2), (te1, te2), (tr1, tr2)] + [(i1[k], i2[k]) for k in
                                                        ("success", "states", "n_executed")]:
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(o2["image"], i2["frames"][:, -1])
    last = full[-1]
    assert last[2][:, -1].tolist() == [True, True, False]  # succeeded
    assert last[3][:, -1].tolist() == [False, False, True]  # truncated
    assert [int(full[3][4]["n_executed"][0]), int(full[4][4]["n_executed"][2])] == [7, 4]
    assert n_full == 23 + 24 + 28  # every executed step renders
    assert n_skip == 3 + 3 + 4  # once per chunk an env is stepped in
    # a single step always renders: per-step callers (collection, videos) get every frame
    e = TabletopEnv(image_size=16)
    e.reset(options={"task": 0, "state_id": 0})
    calls.clear()
    for _ in range(3):
        assert e.step(np.zeros(7))[0]["image"].shape == (16, 16, 3)
    assert len(calls) == 3
    e.close()


def test_initial_frames_match_reset():
    frames, tasks = initial_frames("red_left", 3, seed=0, image_size=16)
    assert frames.shape == (3, 16, 16, 3) and frames.dtype == np.uint8
    assert tasks == ["push the red block to the left"] * 3
    e = TabletopEnv(image_size=16, eval_seed=0)
    o, _ = e.reset(options={"task": "red_left", "state_id": 2})
    np.testing.assert_array_equal(o["image"], frames[2])
    e.close()


def test_dataset_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    eps = []
    for t, task in zip([3, 5, 1], ["a", "b", "a"]):
        eps.append(Episode(
            frames=rng.integers(0, 256, (t + 1, 8, 6, 3), dtype=np.uint8),
            actions=rng.normal(size=(t, 7)).astype(np.float32),
            success_labels=np.arange(t + 1) >= t,
            task=task,
            states=rng.normal(size=(t + 1, 4)).astype(np.float32),
            state_id=t,
        ))
    with TrajectoryWriter(tmp_path / "ds", (8, 6), tasks=["a"], state_dim=4, shard_size=2) as w:
        for e in eps:
            w.add(e)
    meta = json.loads((tmp_path / "ds" / "meta.json").read_text())
    assert meta["n_episodes"] == 3 and [s["n_episodes"] for s in meta["shards"]] == [2, 1]
    ds = TrajectoryDataset(tmp_path / "ds")
    assert len(ds) == 3 and ds.tasks == ["a", "b"]
    for a, b in zip(eps, ds):
        np.testing.assert_array_equal(a.frames, b.frames)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.success_labels, b.success_labels)
        np.testing.assert_array_equal(a.states, b.states)
        assert (a.task, a.state_id, a.success) == (b.task, b.state_id, b.success)
    assert ds.success_rate() == 1.0
    with pytest.raises(FileExistsError):
        TrajectoryWriter(tmp_path / "ds", (8, 6), tasks=[])
    with pytest.raises(ValueError, match="needs 3 frames"):
        Episode(np.zeros((2, 8, 6, 3), np.uint8), np.zeros((2, 7)), np.zeros(3, bool),
                "a").validate()


def test_collect_with_expert(tmp_path):
    cfg = collect.load_config(str(ROOT / "conf/sim/tabletop.yaml"), [
        f"collect.out_dir={tmp_path / 'ds'}", "collect.episodes_per_task=2",
        "collect.num_envs=2", "env.image_size=[16,16]", "collect.tasks=[red_on_plate,red_left]",
    ])
    summary = collect.collect(cfg)
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0
    ds = TrajectoryDataset(tmp_path / "ds")
    for ep in ds:
        first = int(np.argmax(ep.success_labels))
        # ran exactly post_success_steps (8) past the first success, all success frames
        assert len(ep) == first + 8 and ep.success_labels[first:].all()
        assert ep.frames.shape[1:] == (16, 16, 3)
        assert success_from_state(ep.states[-1], ep.task)


class _ConstantPolicy:
    """A policy that always moves up: a real Policy-shaped object for the adapter test."""

    chunk, action_dim = 8, 7

    def sample(self, obs, temperature, generator=None):
        import torch

        from wmrl.interfaces import PolicySample

        b = obs["image"].shape[0]
        assert obs["image"].dtype == torch.uint8 and len(obs["task"]) == b
        actions = torch.zeros(b, 8, 7)
        actions[..., 2] = 1.0
        return PolicySample(torch.zeros(b, 56, dtype=torch.long), actions, torch.zeros(b, 56))


def test_policy_action_source_chunks():
    vec = TabletopVecEnv(2, image_size=16, max_episode_steps=12)
    src = PolicyActionSource(_ConstantPolicy(), temperature=1.0)
    eps = list(rollout_episodes(vec, src, [EpisodeSpec("red_on_plate", state_id=i)
                                           for i in range(3)]))
    vec.close()
    assert [len(e) for e in eps] == [12, 12, 12] and not any(e.success for e in eps)
    z = [e.states[:, 2] for e in eps]  # hand height rises to the workspace top (0.30)
    assert all(zz[-1] > zz[0] + 0.08 for zz in z)


class _FakeObservable:
    """robosuite 1.4's Observable sampling clock (sensor called when the clock says so)."""

    def __init__(self, name, sensor, modality):
        sensor.__modality__ = modality
        self.name, self._sensor, self._enabled = name, sensor, True
        self._sampling_timestep, self._current_delay = 0.05, 0.0  # 20 Hz control
        self._time_since_last_sample, self._sampled = 0.0, False
        self._current_observed_value = None

    @property
    def modality(self):
        return self._sensor.__modality__

    @property
    def obs(self):
        return self._current_observed_value

    def update(self, timestep, obs_cache, force=False):
        if not self._enabled:
            return
        self._time_since_last_sample += timestep
        if force or (not self._sampled and self._sampling_timestep - self._current_delay
                     >= self._time_since_last_sample):
            self._current_observed_value = np.array(self._sensor(obs_cache))
            self._sampled = True
        if self._time_since_last_sample >= self._sampling_timestep:
            if not self._sampled:
                self._current_observed_value = np.array(self._sensor(obs_cache))
            self._time_since_last_sample %= self._sampling_timestep
            self._sampled = False


class _FakeRobosuite:
    """25 physics substeps per control step; the "physics" is a substep counter q, the camera
    image shows q (so a stale or differently timed frame is visible), done once q >= done_at."""

    model_timestep, substeps = 0.002, 25

    def __init__(self, done_at=None, fail_at_step=None):
        self.q, self.n_steps, self.renders = 0, 0, 0
        self.done_at, self.fail_at_step = done_at, fail_at_step

        def camera(cache):
            self.renders += 1
            return np.full((4, 4, 3), self.q % 251, np.uint8)

        self._observables = {o.name: o for o in (
            _FakeObservable("agentview_image", camera, "image"),
            _FakeObservable("robot0_eef_pos", lambda c: np.array([self.q, 0.0, 0.0]), "proprio"),
        )}

    def _update_observables(self, force=False):
        for o in self._observables.values():
            o.update(self.model_timestep, {}, force)

    def _get_observations(self, force_update=False):
        if force_update:
            self._update_observables(force=True)
        return {n: o.obs for n, o in self._observables.items() if o._enabled}

    def step(self, action):
        self.n_steps += 1
        if self.n_steps == self.fail_at_step:
            raise RuntimeError("simulated env failure")
        for _ in range(self.substeps):
            self.q += 1
            self._update_observables()
        return self._get_observations(), 0.0, self.done_at is not None and self.q >= self.done_at, {}


class _FakeOffScreenRenderEnv:
    def __init__(self, rob):
        self.env = rob

    def seed(self, seed):
        pass

    def reset(self):
        self.env.q = 0
        return self.env._get_observations(force_update=True)

    def set_init_state(self, state):  # LIBERO: set the state, then a forced observation
        self.env.q = int(state)
        self.env._update_observables(force=True)
        return self.env._get_observations()

    def step(self, action):
        return self.env.step(action)


def _fake_libero(skip, max_steps=20, wait=3, **rob_kw):
    from wmrl.sim.libero_adapter import LiberoEnv

    env = object.__new__(LiberoEnv)  # LiberoEnv.__init__ needs the libero package
    rob = _FakeRobosuite(**rob_kw)
    env.__dict__.update(env=_FakeOffScreenRenderEnv(rob), suite_name="fake", image_size=4,
                        _task=("fake", 0), _done=True,
                        max_episode_steps=max_steps, num_wait_steps=wait, task_id=0,
                        terminate_on_success=True, skip_intermediate_renders=skip,
                        instruction="do it", init_states=[0, 1000])
    return env, rob


def _run_chunks(env, n_chunks=3, chunk=8):
    out = [env.reset(options={"state_id": 1})[0]]
    for _ in range(n_chunks):
        out.append(env.step_chunk(np.zeros((chunk, 7))))
        if out[-1][2][-1] or out[-1][3][-1]:
            break
    return out


def test_libero_adapter_skip_intermediate_renders_with_robosuite_clock():
    """The LIBERO adapter's skipping against robosuite's observable sampling clock (faked:
    LIBERO is an optional extra): the same observations as rendering every step, the reset's
    wait steps and a mid-chunk truncation included; only the frames returned are rendered; an
    episode that succeeds mid-chunk still ends on a real (end-of-step) frame; the real camera
    sensors are back after a failing step."""
    (skip, rob_s), (full, rob_f) = _fake_libero(True), _fake_libero(False)
    a, b = _run_chunks(skip), _run_chunks(full)  # truncated at step 20: chunk 3, index 3
    assert len(a) == len(b) == 4
    np.testing.assert_array_equal(a[0]["image"], b[0]["image"])
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(o1["image"], o2["image"])
        np.testing.assert_array_equal(o1["state"], o2["state"])
        for x, y in [(r1, r2), (te1, te2), (tr1, tr2), (i1["success"], i2["success"])]:
            np.testing.assert_array_equal(x, y)
        assert "frames" not in i1 and i2["frames"].shape == (8, 4, 4, 3)
    assert b[-1][3].tolist() == [False] * 3 + [True] * 5 and b[-1][4]["n_executed"] == 4
    # rendering every step: 2 forced (reset, set_init_state) + one per wait and env step
    assert rob_f.renders == 2 + 3 + 20
    # skipping: the 2 forced + the last wait step + one per chunk
    assert rob_s.renders == 2 + 1 + 3
    # success at step 13 (chunk 2, index 4): the episode's last frame is rendered after all
    env, rob = _fake_libero(True, max_steps=100, done_at=1000 + (3 + 13) * 25)  # 3 wait steps
    out = _run_chunks(env)
    obs, _, term, _, info = out[-1]
    assert len(out) == 3 and term.tolist() == [False] * 4 + [True] * 4
    assert info["n_executed"] == 5 and obs["image"] is not None
    assert (obs["image"] == rob.q % 251).all()  # the state after the step
    # a step that raises leaves the real camera sensor in place
    env, rob = _fake_libero(True, wait=0, fail_at_step=3)
    real = rob._observables["agentview_image"]._sensor
    env.reset(options={"state_id": 1})
    with pytest.raises(RuntimeError, match="simulated env failure"):
        env.step_chunk(np.zeros((8, 7)))
    assert rob._observables["agentview_image"]._sensor is real
