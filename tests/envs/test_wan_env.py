"""WanWorldModelEnv on the tiny config: reset/grouping, rollout contract, rewards and dones,
active sub-batch, chunk steps = the documented computation bit for bit, state_dict, NaN regeneration, Hydra build."""

import copy
import os

import pytest
import torch
from conftest import CONF_DIR
from omegaconf import OmegaConf
from toys import assert_reward_contract

from wmrl.envs.initial_states import (
    load_initial_states,
    synthetic_initial_states,
    write_initial_states,
)
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.interfaces import ChunkEnv
from wmrl.io.pixels import u8_to_unit_np, unit_to_u8_torch

TINY_CONF = os.path.join(CONF_DIR, "env", "wan_tiny.yaml")
CFG = OmegaConf.to_container(OmegaConf.load(TINY_CONF), resolve=False)
WORLD_MODEL = {k: v for k, v in CFG["world_model"].items() if k != "path"}


class Brightness:
    """Deterministic reward: mean pixel value / 255 of each frame."""

    def __call__(self, frames: torch.Tensor, tasks: list[str]) -> torch.Tensor:
        assert frames.dtype == torch.uint8 and frames.ndim == 5 and len(tasks) == frames.shape[0]
        return frames.float().mean(dim=(2, 3, 4)) / 255.0


@pytest.fixture(scope="module")
def states_dir(tmp_path_factory):
    s = synthetic_initial_states(6, 32, 32, num_tasks=3, seed=1)
    return write_initial_states(tmp_path_factory.mktemp("init"), s.frames, s.tasks,
                                s.context_frames, s.context_actions)


def make_env(states_dir, **kw):
    args = dict(world_model=WORLD_MODEL, reward=Brightness(), initial_states=str(states_dir),
                num_envs=4, group_size=2, seed=0)
    args.update(kw)
    return WanWorldModelEnv(**args)


def actions(seed, b=4):
    return torch.rand(b, 8, 7, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_initial_states_roundtrip_and_errors(states_dir, tmp_path):
    s = load_initial_states(states_dir)
    assert s.frames.shape == (6, 32, 32, 3) and s.frames.dtype == torch.uint8
    assert s.tasks[:4] == ["task 0", "task 1", "task 2", "task 0"]
    assert s.task_ids.tolist() == [0, 1, 2, 0, 1, 2]
    assert s.context_frames.shape == (6, 4, 32, 32, 3) and s.context_actions.shape == (6, 4, 7)
    assert s.resized(64, 64).frames.shape == (6, 64, 64, 3)
    with pytest.raises(FileNotFoundError, match="initial_states.safetensors"):
        load_initial_states(tmp_path)
    with pytest.raises(ValueError, match="one task per state"):
        write_initial_states(tmp_path, s.frames, s.tasks[:2])


def test_u8_table_matches_numpy_path():
    import numpy as np

    x = np.arange(256, dtype=np.uint8)
    assert u8_to_unit_np(x)[0] == -1.0 and u8_to_unit_np(x)[255] == 1.0
    assert u8_to_unit_np(x)[51] == np.float32(51) / np.float32(127.5) - np.float32(1)


def test_reset_groups_and_contract(states_dir):
    env = make_env(states_dir)
    assert isinstance(env, ChunkEnv)
    assert_reward_contract(Brightness(), ["task 0", "task 1"])
    states = load_initial_states(states_dir)
    obs = env.reset(state_ids=[4, 1])
    assert obs["image"].shape == (4, 32, 32, 3) and obs["image"].dtype == torch.uint8
    assert obs["task"] == ["task 1", "task 1", "task 1", "task 1"]
    assert torch.equal(obs["image"][0], states.frames[4]) and torch.equal(obs["image"][3], states.frames[1])
    # condition actions after reset: zeros, gripper -1 (open)
    assert env._cond_actions[:, :, :6].abs().sum() == 0 and (env._cond_actions[:, :, 6] == -1).all()
    obs = env.reset(seed=3)
    assert torch.equal(obs["image"][0], obs["image"][1]) and torch.equal(obs["image"][2], obs["image"][3])
    with pytest.raises(ValueError, match="state_ids"):
        env.reset(state_ids=[0, 9])
    obs2, r, term, trunc, info = env.chunk_step(actions(0))
    assert r.shape == term.shape == trunc.shape == (4, 8) and obs2["image"].shape == (4, 32, 32, 3)
    assert info["success"].dtype == torch.bool and info["episode_len"].tolist() == [8] * 4
    # the same initial state gets different noise within a group
    assert not torch.equal(obs2["image"][0], obs2["image"][1])
    with pytest.raises(ValueError, match="actions must be"):
        env.chunk_step(torch.zeros(4, 7, 7))


def test_rel_reward_success_truncation_and_active_subbatch(states_dir):
    env = make_env(states_dir, use_rel_reward=True, reward_coef=5.0, max_episode_steps=24)
    env.reset(state_ids=[0, 2])
    _, r, term, trunc, info = env.chunk_step(actions(0))
    s = info["scores"]
    # r_t = 5 (s_t - s_{t-1}), s_{-1} = 0
    expect = 5 * (s - torch.cat([torch.zeros(4, 1), s[:, :-1]], 1))
    assert torch.allclose(r, expect, atol=1e-6) and not term.any() and not trunc.any()
    # threshold between the envs' chunk maxima: some succeed now, the rest keep going
    maxima = s.max(1).values
    env2 = make_env(states_dir, use_rel_reward=True, max_episode_steps=24,
                    success_threshold=float(maxima.median()))
    env2.reset(state_ids=[0, 2])
    batch_sizes = []
    hook = env2.model.transformer.register_forward_pre_hook(
        lambda m, a: batch_sizes.append(a[0].shape[0]))
    _, r1, term1, _, info1 = env2.chunk_step(actions(0))
    done = maxima >= maxima.median()
    assert torch.equal(term1[:, -1], done) and not term1[:, :-1].any()
    assert torch.equal(info1["success"], done)
    obs_before = env2._obs_image.clone()
    prev_s = info1["scores"][:, -1]
    _, r2, term2, trunc2, info2 = env2.chunk_step(actions(1))
    hook.remove()
    n_active = int((~done).sum())
    assert batch_sizes == [4] * 5 + [n_active] * 5  # finished envs are not generated
    assert (r2[done] == 0).all() and not term2[done].any()
    assert torch.equal(env2._obs_image[done], obs_before[done])
    # rel reward continues from the previous chunk's last score
    s2 = info2["scores"][~done]
    assert torch.allclose(r2[~done][:, 0], 5 * (s2[:, 0] - prev_s[~done]), atol=1e-6)
    assert info2["episode_len"].tolist() == [8 if d else 16 for d in done.tolist()]
    _, _, _, trunc3, info3 = env2.chunk_step(actions(2))
    alive = ~(done | term2[:, -1])
    assert torch.equal(trunc3[:, -1], alive) and (info3["episode_len"][alive] == 24).all()


def test_binary_reward_without_rel(states_dir):
    env = make_env(states_dir, use_rel_reward=False, success_threshold=0.5)
    env.reset(state_ids=[0, 1])
    _, r, _, _, info = env.chunk_step(actions(0))
    assert torch.equal(r, (info["scores"] >= 0.5).float())


def reference_chunks(env, ids, chunks, thr, context_noise=0.0):
    """The module docstring's contract written out with plain calls: the whole 5-frame clip
    encoded (NumPy pixel conversion), one noise draw for all envs per chunk, the finished envs
    left out; with ``context_noise`` the DiT shown the condition latents plus that much noise
    (its own stream, seeded 13 * seed + 15485863), the clean ones decoded; (active rows, new
    uint8 frames, scores, clip frames) per chunk while any is active."""
    m, s, b = env.model, env.states, len(ids)
    frames = s.frames[ids][:, None].repeat(1, 5, 1, 1, 1).numpy()
    cond_actions = torch.zeros(b, 5, 7)
    cond_actions[..., -1] = -1.0  # gripper open
    if env.kir_reset:
        frames[:, 1:] = s.context_frames[ids].numpy()
        cond_actions[:, 1:] = s.context_actions[ids]
    noise_rng = torch.Generator().manual_seed(0)  # the env's seed
    context_rng = torch.Generator().manual_seed(15_485_863)
    done, out = torch.zeros(b, dtype=torch.bool), []
    for i in range(chunks):
        rows = (~done).nonzero().flatten()
        if not len(rows):
            break
        full = torch.cat([cond_actions[rows], actions(i)[rows]], 1)  # 5 + 8 actions
        cond_actions[rows, 1:] = full[:, -4:]
        clip = torch.from_numpy(u8_to_unit_np(frames[rows.numpy()])).permute(0, 4, 1, 2, 3)
        cond = m.encode(clip)
        noise = torch.randn((b, *cond.shape[1:2], 2, *cond.shape[3:]), generator=noise_rng)
        seen = cond
        if context_noise:
            seen = cond + context_noise * torch.randn((b, *cond.shape[1:]),
                                                      generator=context_rng)[rows]
        new = m.generate(seen, full, noise[rows], env.num_inference_steps)
        video = m.decode(torch.cat([cond, new], 2))[:, :, 5:]
        u8 = unit_to_u8_torch(video.permute(0, 2, 3, 4, 1)).numpy()
        frames[rows.numpy(), 1:] = u8[:, -4:]
        scores = Brightness()(torch.from_numpy(u8), [s.tasks[k] for k in ids[rows].tolist()])
        done[rows] |= scores.max(1).values >= thr
        out.append((rows, u8, scores, frames.copy()))
    return out


@pytest.mark.parametrize("kir,context_noise", [(False, 0.0), (True, 0.0), (False, 0.3)])
@torch.no_grad()
def test_chunk_steps_are_the_documented_computation(states_dir, kir, context_noise):
    """The env (frames on the device, anchor encoded once, re-encoded when the active set
    shrinks) gives the reference's frames, observations and scores bit for bit; with
    context_noise_sigma too."""
    probe = make_env(states_dir, kir_reset=kir, context_noise_sigma=context_noise)
    probe.reset(state_ids=[3, 5])
    thr = float(probe.chunk_step(actions(0))[4]["scores"].max(1).values.median())
    env = make_env(states_dir, kir_reset=kir, success_threshold=thr,
                   context_noise_sigma=context_noise)
    env.reset(state_ids=[3, 5])
    ref = reference_chunks(env, torch.tensor([3, 3, 5, 5]), 3, thr, context_noise)
    assert len(ref) >= 2 and 0 < len(ref[1][0]) < 4  # the active set shrinks after chunk 1
    for i, (rows, u8, scores, frames) in enumerate(ref):
        obs, _, _, _, info = env.chunk_step(actions(i))
        assert torch.equal(info["active"].nonzero().flatten(), rows), i
        assert torch.equal(obs["image"][rows], torch.from_numpy(u8[:, -1])), i
        assert torch.equal(info["scores"][rows], scores), i
        assert torch.equal(env._frames, torch.from_numpy(frames)), i


def test_state_dict_restores_rng_and_episode(states_dir):
    env = make_env(states_dir)
    env.reset(state_ids=[0, 1])
    env.chunk_step(actions(0))
    sd = copy.deepcopy(env.state_dict())
    a = env.chunk_step(actions(1))
    env.offload()
    env.onload()
    other = make_env(states_dir, seed=99)
    other.load_state_dict(sd)
    assert torch.equal(other._check_rng.get_state(), sd["check_rng"])  # resample_check's stream
    assert torch.equal(other._context_rng.get_state(), sd["context_rng"])  # context noise's
    b = other.chunk_step(actions(1))
    assert torch.equal(a[0]["image"], b[0]["image"]) and torch.equal(a[1], b[1])
    assert a[0]["task"] == b[0]["task"]


def test_nan_latents_regenerated_then_clear_error(states_dir):
    env = make_env(states_dir)
    env.reset(state_ids=[0, 1])
    calls = {"n": 0}

    def poison_first_loop(module, args, out):
        calls["n"] += 1
        if calls["n"] <= 5:  # every step of the first denoising loop
            return (out[0] * float("nan"),)

    h = env.model.transformer.register_forward_hook(poison_first_loop)
    _, _, _, _, info = env.chunk_step(actions(0))
    h.remove()
    assert info["regenerations"] == 1 and calls["n"] == 10
    h = env.model.transformer.register_forward_hook(lambda m, a, o: (o[0] * float("inf"),))
    with pytest.raises(FloatingPointError, match="NaN/Inf"):
        env.chunk_step(actions(1))
    h.remove()


def test_hydra_instantiate_tiny_config(tmp_path):
    from hydra.utils import instantiate

    cfg = OmegaConf.load(TINY_CONF)
    cfg.num_envs, cfg.group_size = 4, 2
    cfg.world_model.path = None
    env = instantiate(cfg, reward=Brightness())
    obs = env.reset(seed=0)
    assert obs["image"].shape == (4, 32, 32, 3)
    assert env.num_envs == 4 and env.group_size == 2 and env.chunk == 8


def test_resample_check_leaves_trajectories_and_is_a_second_draw(states_dir):
    """The check redraws an ending episode's last chunk from its own RNG stream: the
    trajectory is unchanged, and the verdict is the one a plain env gives with that noise."""
    with_check = make_env(states_dir, resample_check=True, max_episode_steps=24)
    plain = make_env(states_dir, max_episode_steps=24)
    for env in (with_check, plain):
        env.reset(seed=3)
    for k in range(3):
        a, b = with_check.chunk_step(actions(k)), plain.chunk_step(actions(k))
        assert torch.equal(a[0]["image"], b[0]["image"]) and torch.equal(a[1], b[1])
        assert torch.equal(a[4]["success"], b[4]["success"])
    assert "resample_success" in a[4] and "resample_success" not in b[4]

    # one-chunk episodes: every env ends at chunk 1, so each gets one resample. A plain env
    # whose main noise stream is the check's stream must reach the same verdicts.
    probe = make_env(states_dir, max_episode_steps=8)
    probe.reset(seed=5)
    maxima = probe.chunk_step(actions(0))[4]["scores"].max(1).values
    threshold = float(maxima.median())  # a threshold between the envs' chunk maxima
    env = make_env(states_dir, resample_check=True, max_episode_steps=8,
                   success_threshold=threshold)
    twin = make_env(states_dir, max_episode_steps=8, success_threshold=threshold)
    env.reset(seed=5)
    twin.reset(seed=5)
    twin._noise_rng.set_state(env._check_rng.get_state())
    info = env.chunk_step(actions(0))[4]
    twin_scores = twin.chunk_step(actions(0))[4]["scores"]
    expect = twin_scores.max(1).values >= threshold
    assert torch.equal(info["resample_success"], expect)
    assert 0 < int(expect.sum()) < 4 or 0 < int(info["success"].sum()) < 4
    assert torch.equal(info["success"], maxima >= threshold)  # the main draw: as the probe's


@pytest.mark.parametrize("read", ["min", "mean"])
def test_resample_return_reads_both_draws(states_dir, read):
    """return = 5 * min (mean) of the two draws' last-frame scores; one-chunk episodes."""
    env = make_env(states_dir, resample_check=True, resample_return=read, use_rel_reward=True,
                   max_episode_steps=8)
    plain = make_env(states_dir, use_rel_reward=True, max_episode_steps=8)
    twin = make_env(states_dir, use_rel_reward=True, max_episode_steps=8)
    for e in (env, plain, twin):
        e.reset(seed=5)
    twin._noise_rng.set_state(env._check_rng.get_state())
    _, r, _, _, info = env.chunk_step(actions(0))
    first = plain.chunk_step(actions(0))[4]["scores"][:, -1]
    second = twin.chunk_step(actions(0))[4]["scores"][:, -1]
    expect = torch.minimum(first, second) if read == "min" else (first + second) / 2
    assert torch.allclose(r.sum(1), 5 * expect, atol=1e-5)
    assert torch.allclose(info["return"], 5 * expect, atol=1e-5)
    assert not torch.allclose(first, second)  # the two draws differ: the test can fail
    with pytest.raises(ValueError, match="resample_check=true"):
        make_env(states_dir, resample_return=read, use_rel_reward=True)


def test_resample_check_refuses_a_stateful_reward(states_dir):
    class WithHistory(Brightness):
        stateful = True

    with pytest.raises(ValueError, match="env.resample_check=false"):
        make_env(states_dir, resample_check=True, reward=WithHistory())
