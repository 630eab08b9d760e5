"""The policy in the world model beside the policy in the simulator
(wmrl/eval/side_by_side.py), with the shipped policy, world model and reward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_config import fit_cfg

from wmrl.build import build, to_container
from wmrl.eval.evaluate import evaluate_policy
from wmrl.eval.side_by_side import (
    SceneRollouts,
    imagined_beside_eval,
    imagined_vs_real,
    paired_gap,
    replay_in_simulator,
)
from wmrl.io.videos import side_by_side_video
from wmrl.sim.tabletop import initial_frames


def test_side_by_side_video_holds_the_shorter():
    a = np.arange(3, dtype=np.uint8)[:, None, None, None] * np.ones((3, 4, 5, 3), np.uint8)
    b = 10 + np.arange(5, dtype=np.uint8)[:, None, None, None] * np.ones((5, 4, 5, 3), np.uint8)
    v = side_by_side_video(a, b)
    assert v.shape == (5, 4, 12, 3)  # 5 frames, 5 + 2 + 5 wide
    assert (v[3:, :, :5] == 2).all() and (v[:, :, 5:7] == 255).all()  # a holds its last frame
    assert (v[4, :, 7:] == 14).all()


@pytest.fixture(scope="module")
def rollouts():
    cfg = fit_cfg()
    torch.manual_seed(0)
    policy = build(cfg.policy)
    sim = to_container(cfg.callbacks.sim_eval.env)
    kw = dict(task="red_of_two", scenes=2, chunk=8, max_episode_steps=16, sim_env=sim, seed=0)
    env = to_container(cfg.env)
    return imagined_vs_real(policy, env, **kw), imagined_vs_real(policy, env, **kw), cfg


def test_the_same_scenes_in_the_world_model_and_the_simulator(rollouts):
    first, again, cfg = rollouts
    start, _ = initial_frames("red_of_two", 2, seed=0, image_size=64, camera="front_close")
    for i, r in enumerate(first):
        # both start from the simulator's own first frame of scene i
        assert np.array_equal(r.real[0], start[i]) and np.array_equal(r.imagined[0], start[i])
        assert r.imagined.shape[1:] == r.real.shape[1:] == (64, 64, 3)
        assert 1 < len(r.imagined) <= 17 and 1 < len(r.real) <= 17
        # the verdict is the env's: the peak reward score against the threshold
        assert r.imagined_success == (r.peak_score >= cfg.env.success_threshold)
        assert 0.0 <= r.imagined_return <= cfg.env.reward_coef
    # seeded: the same videos again
    assert all(np.array_equal(a.imagined, b.imagined) and np.array_equal(a.real, b.real)
               for a, b in zip(first, again))


def test_pace_weights_are_the_ones_imagined(rollouts):
    """With PACE's refined weights (here: the shipped ones shifted) the imagined video
    changes and the real one does not."""
    from wmrl.pace.round import trained_state
    from wmrl.world_model.action_wan import ActionWanModel

    first, _, cfg = rollouts
    model = ActionWanModel.from_pretrained(cfg.env.world_model.path)
    with torch.no_grad():
        for p in model.transformer.parameters():
            p.add_(0.05)
    torch.manual_seed(0)
    policy = build(cfg.policy)
    refined = imagined_vs_real(policy, to_container(cfg.env), "red_of_two", 2, 8, 16,
                               to_container(cfg.callbacks.sim_eval.env), seed=0,
                               weights=(trained_state(model), None))
    assert all(np.array_equal(a.real, b.real) for a, b in zip(first, refined))
    assert not all(np.array_equal(a.imagined, b.imagined) for a, b in zip(first, refined))


def test_paired_gap_by_hand():
    """World model 3/4, simulator 2/4, scene 0 the only disagreement: d = [1, 0, 0, 0], mean
    0.25, sample std 0.5, SE 0.25, t_{0.975, 3} = 3.1824: 0.25 +- 0.7956."""
    frame = np.zeros((1, 2, 2, 3), np.uint8)
    res = [SceneRollouts(i, frame, frame, bool(s), bool(w), 0.0, 0.0)
           for i, (w, s) in enumerate([(1, 0), (1, 1), (1, 1), (0, 0)])]
    p = paired_gap(res)
    assert (p["sim/paired_scenes"], p["sim/paired_wm_success"], p["sim/paired_sim_success"],
            p["sim/paired_gap"], p["sim/paired_agreement"]) == (4, 0.75, 0.5, 0.25, 0.75)
    assert [p["sim/paired_gap_ci95_low"], p["sim/paired_gap_ci95_high"]] == pytest.approx(
        [0.25 - 0.7956, 0.25 + 0.7956], abs=1e-4)
    assert "sim/paired_gap_ci95_low" not in paired_gap(res[:1])  # one scene: no interval


def test_replaying_actions_in_the_simulator_is_the_episode_they_came_from(rollouts):
    """The simulator is deterministic: a real episode's actions replayed from its scene give
    its frames, pixel for pixel, and its verdict. The imagined episodes keep one action per
    imagined frame; replayed, they start from the imagined episode's first frame."""
    from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
    from wmrl.sim.tabletop import TabletopVecEnv

    first, _, cfg = rollouts
    sim = {**to_container(cfg.callbacks.sim_eval.env), "max_episode_steps": 16}
    policy = build(cfg.policy)
    vec = TabletopVecEnv(2, **sim, terminate_on_success=True)
    try:
        real = list(rollout_episodes(vec, PolicyActionSource(policy, 1.0, seed=3),
                                     [EpisodeSpec("red_of_two", state_id=i) for i in (0, 1)]))
    finally:
        vec.close()
    frame = np.zeros((1, 2, 2, 3), np.uint8)
    res = [SceneRollouts(i, frame, frame, False, False, 0.0, 0.0, actions=ep.actions)
           for i, ep in enumerate(real)]
    videos = replay_in_simulator(res, "red_of_two", sim)
    assert all(np.array_equal(v, ep.frames) for v, ep in zip(videos, real))
    assert [r.replayed_success for r in res] == [bool(ep.success) for ep in real]
    for r in first:
        assert r.actions.shape == (len(r.imagined) - 1, 7)
    videos = replay_in_simulator(first, "red_of_two", sim)
    assert all(np.array_equal(v[0], r.imagined[0]) and len(v) <= len(r.imagined)
               for v, r in zip(videos, first))
    assert all(isinstance(r.replayed_success, bool) for r in first)


def test_the_script_prints_the_replayed_figures(capsys):
    """scripts/imagined_vs_real.py without --out: no figure, a row per scene with its replayed
    verdict, then paired_gap's figures, the replay's included."""
    import json
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "imagined_vs_real.py"
    argv = sys.argv
    sys.argv = [str(script), "--scenes", "2", "rollout.max_episode_steps=16"]
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
    assert done.value.code == 0
    rows, figures = (json.loads(line) for line in capsys.readouterr().out.splitlines()[-2:])
    rep = [r["replayed_sim_success"] for r in rows]
    assert len(rows) == 2 and all(isinstance(v, bool) for v in rep)
    assert figures["sim/paired_replay_success"] == sum(rep) / 2
    assert figures["sim/paired_scenes"] == 2


def test_replay_figures_by_hand():
    """Imagined successes in scenes 0, 1, 2, the simulator succeeding with the same actions in
    scenes 1 and 3: replayed success 2/4, agreement 1/4 (scene 1 only: 0 and 2 are false
    imagined successes, 3 a missed one), precision 1/3."""
    frame = np.zeros((1, 2, 2, 3), np.uint8)
    res = [SceneRollouts(i, frame, frame, False, bool(w), 0.0, 0.0, replayed_success=bool(r))
           for i, (w, r) in enumerate([(1, 0), (1, 1), (1, 0), (0, 1)])]
    p = paired_gap(res)
    assert (p["sim/paired_replay_success"], p["sim/paired_replay_agreement"],
            p["sim/paired_replay_precision"]) == (0.5, 0.25, pytest.approx(1 / 3))
    none = [SceneRollouts(0, frame, frame, False, False, 0.0, 0.0, replayed_success=True)]
    assert np.isnan(paired_gap(none)["sim/paired_replay_precision"])
    assert "sim/paired_replay_success" not in paired_gap(res[:1] + [SceneRollouts(
        1, frame, frame, False, False, 0.0, 0.0)])  # a scene not replayed: no replay figures


def test_the_world_model_half_beside_an_eval_is_the_whole_side_by_side(rollouts):
    """What SimEvalCallback runs: the simulator's verdicts and videos of its own eval (2 envs
    at a time, as the side-by-side's 2 scenes run), the world model from the same first
    frames: scene for scene what imagined_vs_real gives, and the process's RNGs untouched."""
    first, _, cfg = rollouts
    torch.manual_seed(0)
    policy = build(cfg.policy)
    sim = to_container(cfg.callbacks.sim_eval.env)
    ev = evaluate_policy(policy, ["red_of_two"], episodes_per_task=2, num_envs=2, num_videos=1,
                         env={**sim, "max_episode_steps": 16})
    torch_rng, np_rng = torch.get_rng_state(), np.random.get_state()
    beside = imagined_beside_eval(policy, to_container(cfg.env), "red_of_two",
                                  ev.outcomes["red_of_two"], [v[1] for v in ev.videos], 8, 16,
                                  sim)
    assert torch.equal(torch.get_rng_state(), torch_rng)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state()[1:3], np_rng[1:3]))
    assert [r.real_success for r in beside] == [r.real_success for r in first]
    assert [r.imagined_success for r in beside] == [r.imagined_success for r in first]
    assert all(np.array_equal(a.imagined, b.imagined) for a, b in zip(beside, first))
    # the eval kept scene 0's video (num_videos=1): the same episode; scene 1 its first frame
    assert np.array_equal(beside[0].real, first[0].real)
    assert np.array_equal(beside[1].real, first[1].real[:1])
