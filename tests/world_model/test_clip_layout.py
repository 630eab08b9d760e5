"""The clip layout (wmrl/world_model/clip_layout.py): hand-checked indices, and a real
``WanWorldModelEnv`` fed an episode's actions gives its model the frames and actions that
``build_clip`` puts in the trainer's clip of the same episode."""

import numpy as np
import torch

from tests.tiny_models import tiny_world_model
from wmrl.envs.initial_states import InitialStates
from wmrl.envs.wan_env import WanWorldModelEnv
from wmrl.io.pixels import u8_to_unit_torch
from wmrl.world_model.clip_layout import RESET_ACTION, build_clip, chunk_actions, hold_action


def _numbered_episode(t_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame t filled with value t, a_t[0] = t / 100, gripper closed (1)."""
    frames = np.arange(t_len + 1, dtype=np.uint8)[:, None, None, None] * np.ones(
        (1, 2, 2, 3), np.uint8)
    actions = np.zeros((t_len, 7), np.float32)
    actions[:, 0] = np.arange(t_len) / 100
    actions[:, 6] = 1.0
    return frames, actions


def test_clip_indices_hand_checked():
    frames, actions = _numbered_episode(20)
    f, a = build_clip(frames, actions, 0)
    # after reset: 5 copies of f_0 with reset actions (gripper -1), then f_1..f_8 / a_0..a_7
    assert f[:, 0, 0, 0].tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert (a[:5] == RESET_ACTION).all() and RESET_ACTION.tolist() == [0] * 6 + [-1]
    assert np.allclose(a[5:, 0], np.arange(8) / 100)
    f, a = build_clip(frames, actions, 8)
    # anchor f_0, the last 4 frames of the previous chunk f_5..f_8 with a_4..a_7, then new
    assert f[:, 0, 0, 0].tolist() == [0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    assert (a[0] == RESET_ACTION).all()
    assert np.allclose(a[1:, 0], np.arange(4, 16) / 100)
    f, a = build_clip(frames, actions, 16)  # runs past T = 20: hold the last frame
    assert f[5:, 0, 0, 0].tolist() == [17, 18, 19, 20, 20, 20, 20, 20]
    assert np.allclose(a[9:, :6], 0) and (a[9:, 6] == 1.0).all()
    last = chunk_actions(actions, 2)  # actions 16..19, then 4 hold actions
    assert last.shape == (8, 7) and last[4:, 6].tolist() == [1] * 4 and np.allclose(last[4:, :6], 0)
    assert hold_action(actions[:0]).tolist() == RESET_ACTION.tolist()  # an empty episode


class _Recorder:
    """What the env hands its (real) model: the pixel frames it encodes and the actions it
    generates with, per chunk step."""

    def __init__(self, model):
        self.frames, self.actions = [], []
        enc_anchor, enc_rest, generate = (model.encode_anchor, model.encode_with_anchor,
                                          model.generate)

        def encode_anchor(frame0):
            self.anchor = frame0
            return enc_anchor(frame0)

        def encode_with_anchor(anchor, rest):
            self.frames.append(torch.cat([self.anchor, rest], 2))  # [b, 3, 5, H, W]
            return enc_rest(anchor, rest)

        def gen(cond, actions, noise, steps):
            self.actions.append(actions.clone())
            return generate(cond, actions, noise, steps)

        model.encode_anchor, model.encode_with_anchor, model.generate = (
            encode_anchor, encode_with_anchor, gen)


def test_the_env_feeds_its_model_the_trainers_clip():
    """An episode of 12 actions through a tiny env, chunk by chunk (``chunk_actions``); the
    episode's frames 1..12 are the env's own imagined frames, so the trainer's clip of it at
    s = 0 and s = 8 must hold exactly the env's condition frames, condition actions and chunk
    actions, and its new frames must be the frames the env produced."""
    g = torch.Generator().manual_seed(0)
    t_len, size = 12, 32
    actions = (torch.rand(t_len, 7, generator=g) * 2 - 1).numpy()
    frames = np.zeros((t_len + 1, size, size, 3), np.uint8)
    frames[0] = torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8).numpy()
    states = InitialStates(torch.from_numpy(frames[:1]), ["task"], torch.zeros(1, dtype=torch.long))
    env = WanWorldModelEnv(tiny_world_model(), lambda f, tasks: torch.zeros(f.shape[:2]), states,
                           num_envs=1, num_inference_steps=1, height=size, width=size,
                           return_frames=True)
    rec = _Recorder(env.model)
    env.reset(state_ids=[0])
    imagined = []
    for c in range(2):
        info = env.chunk_step(torch.from_numpy(chunk_actions(actions, c))[None])[4]
        imagined.append(info["frames"][0].numpy())
    frames[1:] = np.concatenate(imagined)[:t_len]  # the episode the env imagined

    for c, s in enumerate((0, 8)):
        f, a = build_clip(frames, actions, s)
        clip = u8_to_unit_torch(torch.from_numpy(f)).permute(3, 0, 1, 2)  # [3, 13, H, W]
        assert torch.equal(rec.frames[c][0], clip[:, :5]), f"condition frames at s={s}"
        assert torch.equal(rec.actions[c][0], torch.from_numpy(a)), f"actions at s={s}"
        new = min(8, t_len - s)  # the clip holds the last frame past the episode's end
        assert np.array_equal(f[5:5 + new], imagined[c][:new]), f"new frames at s={s}"
    assert (rec.actions[1][0, 9:, 6] == float(actions[-1, 6])).all()  # the hold action
