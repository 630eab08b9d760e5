"""``task.train_pool``: GRPO's scenes apart from every evaluation set, rendered by the
simulator once and cached; the fit's env starts from them (the fit itself with a pool:
tests/test_resume.py's default fit)."""

import numpy as np
import pytest
from test_config import fit_cfg

from wmrl.config import ConfigError, validate
from wmrl.envs import train_pool
from wmrl.envs.initial_states import load_initial_states
from wmrl.schema import with_defaults
from wmrl.sim.tabletop import TabletopEnv


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def pool_cfg(*over):
    return with_defaults(fit_cfg("experiment=train_pool", "task.train_pool.size=3",
                                 "task.image_size=[32,32]", *over))


def test_pool_frames_are_the_simulators_first_frames_and_are_cached(cache, monkeypatch):
    cfg = pool_cfg()
    validate(cfg)
    path = train_pool.ensure_pool(cfg.task)
    assert path == cache / "train_pool" / "red_of_two-front_close-32x32-seed3-n3"
    states = load_initial_states(path)
    assert len(states) == 3 and tuple(states.frames.shape) == (3, 32, 32, 3)
    env = TabletopEnv(image_size=(32, 32), eval_seed=3, task="red_of_two", camera="front_close")
    try:
        for i in (0, 2):  # state i of seed 3 is what the simulator shows at its reset
            first = env.reset(options={"task": "red_of_two", "state_id": i})[0]["image"]
            assert np.array_equal(states.frames[i].numpy(), first), i
    finally:
        env.close()
    assert states.tasks == [env.task.instruction] * 3

    def render_again(*a, **k):
        raise AssertionError("the cached pool was rendered again")

    monkeypatch.setattr(train_pool, "initial_frames", render_again)
    assert train_pool.ensure_pool(cfg.task) == path  # the cache, not the simulator
    with pytest.raises(ConfigError, match=r"task.train_pool: .* holds 3 states .* asks for 4"):
        train_pool.ensure_pool(pool_cfg("task.train_pool.size=4", f"task.train_pool.dir={path}")
                               .task)


def test_the_fit_env_starts_from_the_pool(cache):
    cfg = train_pool.start_from_pool(pool_cfg())
    pool = cache / "train_pool" / "red_of_two-front_close-32x32-seed3-n3"
    assert cfg.env.initial_states == str(pool)
    sim = train_pool.start_from_pool(pool_cfg("env=tabletop_sim"))
    assert (sim.env.eval_seed, sim.env.num_states) == (3, 3)
    # the sim eval still scores the task's own scenes, now never trained on
    assert sim.callbacks.sim_eval.env.eval_seed == 0
    plain = with_defaults(fit_cfg())
    assert train_pool.start_from_pool(plain).env.initial_states == plain.env.initial_states


@pytest.mark.parametrize("seed", [0, 1])
def test_a_pool_drawn_with_an_evaluation_seed_is_refused(seed):
    with pytest.raises(ConfigError, match=rf"task.train_pool.seed={seed} is not allowed: a "
                                          "seed no evaluation uses"):
        validate(fit_cfg("experiment=train_pool", f"task.train_pool.seed={seed}"))
