"""LIBERO (the optional extra, ``make libero``): eval on its fixed initial states, the GRPO
rollout env, skipped renders. Tests marked by the ``libero`` fixture skip without the extra;
the config and ImportError tests run everywhere."""

from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest
import torch
from conftest import CONF_DIR
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from wmrl.build import build
from wmrl.config import ConfigError, validate
from wmrl.envs.initial_states import group_state_ids, seed_reset_generator
from wmrl.eval.evaluate import evaluate_policy
from wmrl.eval.results import run_eval
from wmrl.policies.configs import tiny_config
from wmrl.policies.openvla_oft import build_policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK = "libero_spatial/0"
TINY = {"image_size": 32, "num_wait_steps": 2}  # small frames, short settling: fast tests
STATS = {"action": {"q01": [-0.5] * 6 + [0.0], "q99": [0.5] * 6 + [1.0],
                    "mask": [True] * 6 + [False]}}


@pytest.fixture
def libero():
    return pytest.importorskip("libero", reason="the LIBERO extra is not installed: make libero")


def tiny_policy():
    cfg = tiny_config(image_size=32)
    cfg["norm_stats"] = {"tabletop": STATS}
    return build_policy(config=cfg, unnorm_key="tabletop", seed=0)


def compose_cfg(name, *overrides):
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return compose(name, overrides=list(overrides))


def _hide_libero(monkeypatch):
    """Make ``import libero`` fail, as without the extra (also where it is installed)."""
    for key in [k for k in sys.modules if k == "libero" or k.startswith("libero.")]:
        monkeypatch.setitem(sys.modules, key, None)
    monkeypatch.setitem(sys.modules, "libero", None)


def _raises_missing_extra(fn, *args):
    """``fn`` fails with our ImportError (Hydra's instantiate wraps it, message included)."""
    with pytest.raises(Exception, match="ImportError.*run `make libero`") as info:
        fn(*args)
    assert isinstance(info.value.__cause__, ImportError)


def test_configs_compose_and_building_without_the_extra_names_make_libero(monkeypatch):
    """sim=libero (eval) and env=libero_sim (experiment=sim_oracle) compose and validate; the
    default eval stays on the tabletop; building either env without LIBERO is an ImportError
    that says to run `make libero`."""
    assert "sim" not in compose_cfg("eval")  # the default: the tabletop (env)
    ev = compose_cfg("eval", "sim=libero", "tasks=[libero_spatial/0,libero_goal/3]")
    assert ev.sim._target_ == "wmrl.sim.libero_vec.LiberoVecEnv"
    assert list(ev.tasks) == ["libero_spatial/0", "libero_goal/3"] and ev.episodes_per_task == 50
    assert list(compose_cfg("eval", "sim=libero").tasks) == ["libero_spatial"]
    fit = compose_cfg("fit", "run_dir=/tmp/wmrl-test", "experiment=sim_oracle", "env=libero_sim",
                      "rollout.max_episode_steps=224")
    validate(fit)
    assert fit.env._target_ == "wmrl.envs.libero_sim_env.LiberoSimEnv" and fit.env.reward is None

    _hide_libero(monkeypatch)
    env = dict(OmegaConf.to_container(fit.env, resolve=True), num_envs=2, group_size=2,
               chunk=8, max_episode_steps=224)  # the sizes the rollout adds
    _raises_missing_extra(build, env)
    cfg = OmegaConf.to_container(ev, resolve=True)
    cfg.update(num_envs=1, episodes_per_task=1)
    _raises_missing_extra(run_eval, cfg)  # scripts/eval.py builds sim=libero
    # the size checks come first, without LIBERO too
    with pytest.raises(Exception, match="multiple of chunk"):
        build(dict(env, max_episode_steps=220))


def test_offline_config_points_at_the_installed_package(libero, tmp_path, monkeypatch):
    """Without LIBERO_CONFIG_PATH the adapter writes a config of the installed package's own
    paths (no prompt, no download) and LIBERO reads it; a set LIBERO_CONFIG_PATH is kept."""
    from wmrl.sim import libero_adapter

    monkeypatch.setenv("LIBERO_CONFIG_PATH", "")  # restored after the test, set or not
    monkeypatch.delenv("LIBERO_CONFIG_PATH")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = libero_adapter.ensure_offline_config()
    assert folder.startswith(str(tmp_path / "wmrl" / "libero")) and \
        os.environ["LIBERO_CONFIG_PATH"] == folder
    from libero.libero import get_libero_path

    paths = libero_adapter.offline_config_paths()
    for key in ("bddl_files", "init_states", "assets"):
        assert get_libero_path(key) == paths[key] and os.path.isdir(paths[key]), key
    assert os.listdir(os.path.join(paths["bddl_files"], "libero_spatial"))
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(tmp_path / "mine"))
    assert libero_adapter.ensure_offline_config() == str(tmp_path / "mine")


def test_task_names(libero):
    """Tasks by "<suite>/<id>", id, name or instruction; a suite alone expands; unknown tasks
    and more episodes than fixed states are refused before any episode runs."""
    from wmrl.sim.libero_vec import LiberoVecEnv

    vec = LiberoVecEnv(1, suite="libero_spatial")  # robosuite envs are built on reset only
    t = vec.envs[0]._suite("libero_spatial").get_task(2)
    assert vec.task_names(["libero_goal/3", 2, "2", t.name, t.language, "libero_spatial/" + t.name]
                          ) == ["libero_goal/3"] + ["libero_spatial/2"] * 5
    assert vec.task_names(["libero_object"]) == [f"libero_object/{i}" for i in range(10)]
    assert vec.task_names([TASK], 50) == [TASK]
    with pytest.raises(ConfigError, match="episodes_per_task=51.*50 fixed initial states"):
        vec.task_names([TASK], 51)
    with pytest.raises(ConfigError, match="out of range for libero_spatial"):
        vec.task_names(["libero_spatial/10"])
    with pytest.raises(ConfigError, match="unknown LIBERO task 'fly'"):
        vec.task_names(["fly"])
    with pytest.raises(ConfigError, match="unknown LIBERO suite"):
        vec.task_names(["libero_nowhere/0"])
    vec.close()


def test_evaluate_tiny_policy_on_libero(libero):
    """evaluate_policy on LIBERO's fixed initial states (what scripts/eval.py sim=libero runs):
    a random tiny policy, two episodes of 8 steps, every frame a real LIBERO render."""
    spec = {"_target_": "wmrl.sim.libero_vec.LiberoVecEnv", "max_episode_steps": 8, **TINY}
    res = evaluate_policy(tiny_policy(), tasks=[TASK], episodes_per_task=2, num_envs=2,
                          num_videos=2, vec_env=spec)
    assert res.episodes == 2 and set(res.success) == {TASK} and res.success[TASK] == 0.0
    (_, f0, ok0), (_, f1, ok1) = res.videos
    assert not ok0 and not ok1  # 8 random steps do not solve a LIBERO task
    assert f0.shape == f1.shape == (9, 32, 32, 3) and f0.dtype == np.uint8  # reset + 8 steps
    assert f0.std() > 10  # a rendered scene, not a blank frame
    assert not np.array_equal(f0[0], f0[-1])  # the arm moved
    assert not np.array_equal(f0[0], f1[0])  # initial states 0 and 1 differ


def test_libero_sim_env_contract(libero):
    """LiberoSimEnv: the rollout-env contract (shapes, dtypes), groups share their initial state,
    reset draws as TabletopSimEnv, episodes truncate at max_episode_steps."""
    from wmrl.envs.libero_sim_env import LiberoSimEnv
    from wmrl.sim.libero_adapter import _camera_observables

    env = LiberoSimEnv(num_envs=2, group_size=2, chunk=4, max_episode_steps=8, task=TASK,
                       seed=0, **TINY)
    obs = env.reset(seed=3)
    # the wrist camera is not rendered unless asked for (wrist_camera=True)
    assert [ob.name for ob in _camera_observables(env.vec.envs[0].env)] == ["agentview_image"]
    g = torch.Generator()
    seed_reset_generator(g, 3)
    drawn = group_state_ids(None, 1, 2, 50, g).tolist()
    assert [e.state_id for e in env.vec.envs] == drawn
    assert obs["image"].dtype == torch.uint8 and obs["image"].shape == (2, 32, 32, 3)
    instruction = env.vec.envs[0].instruction
    assert obs["task"] == [instruction] * 2
    assert torch.equal(obs["image"][0], obs["image"][1])  # one group, one scene
    actions = torch.rand(2, 4, 7, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for _ in range(2):
        obs, rew, term, trunc, info = env.chunk_step(actions)
        assert obs["image"].shape == (2, 32, 32, 3) and obs["image"].dtype == torch.uint8
        assert rew.shape == term.shape == trunc.shape == (2, 4) and rew.dtype == torch.float32
        assert term.dtype == trunc.dtype == torch.bool
        assert info["success"].shape == (2,) and info["success"].dtype == torch.bool
    assert trunc[:, -1].all() and not info["success"].any()  # 8 steps: truncated, not solved
    with pytest.raises(ValueError, match=r"actions must be \[num_envs, chunk, 7\]"):
        env.chunk_step(actions[:, :3])
    other = env.reset(state_ids=[drawn[0] + 1])
    assert not torch.equal(other["image"][0], obs["image"][0])  # another initial state
    env.close()
    with pytest.raises(ValueError, match="num_states=51"):
        LiberoSimEnv(num_envs=2, group_size=2, num_states=51, **TINY)


def test_skip_intermediate_renders_same_observations(libero):
    """Real LIBERO, both cameras: with skipped renders the observations (agent view and
    wrist), rewards, done flags and success are those of rendering every step, from 2 renders
    per camera instead of 8."""
    from wmrl.envs.libero_sim_env import LiberoSimEnv
    from wmrl.sim.libero_adapter import _camera_observables

    cameras = ["agentview_image", "robot0_eye_in_hand_image"]
    actions = torch.rand(1, 4, 7, generator=torch.Generator().manual_seed(1)) * 2 - 1
    out, renders, wrist = {}, {}, {}
    for skip in (True, False):
        env = LiberoSimEnv(num_envs=1, chunk=4, max_episode_steps=8, task=TASK,
                           skip_intermediate_renders=skip, wrist_camera=True, **TINY)
        out[skip] = [env.reset(state_ids=[4])]  # builds the robosuite env
        cams = _camera_observables(env.vec.envs[0].env)
        assert sorted(ob.name for ob in cams) == cameras
        count = {ob.name: 0 for ob in cams}
        for ob in cams:  # count the real camera renders
            def counted(cache, _real=ob._sensor, _name=ob.name, _count=count):
                _count[_name] += 1
                return _real(cache)
            ob._sensor = functools.wraps(ob._sensor)(counted)
        wrist[skip] = [env.vec._last[0]["wrist_image"]]
        for _ in range(2):
            out[skip].append(env.chunk_step(actions))
            wrist[skip].append(env.vec._last[0]["wrist_image"])  # the env's own last obs
        renders[skip] = count
        env.close()
    assert renders == {True: dict.fromkeys(cameras, 2), False: dict.fromkeys(cameras, 8)}
    torch.testing.assert_close(out[True][0]["image"], out[False][0]["image"], rtol=0, atol=0)
    for a, b in zip(out[True][1:], out[False][1:]):
        assert torch.equal(a[0]["image"], b[0]["image"])
        for x, y in zip(a[1:4], b[1:4]):
            assert torch.equal(x, y)
        assert torch.equal(a[4]["success"], b[4]["success"])
    for a, b in zip(wrist[True], wrist[False]):
        assert a.shape == (32, 32, 3) and a.dtype == np.uint8
        np.testing.assert_array_equal(a, b)


def test_each_env_renders_its_own_scene(libero):
    """Several LIBERO envs in one process (a LiberoVecEnv): each renders with its own GL
    context and frees its GL objects in it, so an env's frames do not change when an env of
    another task is built, reset or switched to a third task in between (robosuite renders,
    and frees, in whichever context is current)."""
    from wmrl.sim.libero_adapter import LiberoEnv

    a = LiberoEnv(task=TASK, **TINY)
    a.reset(options={"state_id": 0})
    alone = [a.step(np.zeros(7))[0]["image"] for _ in range(2)]
    a.reset(options={"state_id": 0})
    b = LiberoEnv(task="libero_goal/0", **TINY)
    b_obs = b.reset(options={"state_id": 0})[0]["image"]  # b's new context is now current
    np.testing.assert_array_equal(a.step(np.zeros(7))[0]["image"], alone[0])
    b.reset(options={"task": "libero_goal/1"})  # closes b's first robosuite env
    np.testing.assert_array_equal(a.step(np.zeros(7))[0]["image"], alone[1])
    assert not np.array_equal(b_obs, alone[0])  # another scene
    a.close()
    b.close()
