"""Own-context clips (wmrl/finetune/own_context.py): the mixed episode by hand, the clips equal
to encoding the hand-built mixed clip, and the trainer option that draws them."""

import numpy as np
import pytest
import torch

from tests.tiny_models import tiny_world_model
from wmrl.errors import ConfigError
from wmrl.finetune.own_context import mixed_frames, own_context_clips
from wmrl.finetune.reward_data import imagined_replays
from wmrl.finetune.world_model import build_clips, encode_clips
from wmrl.finetune.world_model_module import WorldModelFinetune
from wmrl.sim.dataset import Episode


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _episode(t_len: int, seed: int) -> Episode:
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (t_len + 1, 32, 32, 3), dtype=np.uint8)
    actions = rng.uniform(-1, 1, (t_len, 7)).astype(np.float32)
    return Episode(frames, actions, np.zeros(t_len + 1, bool), "task")


def test_mixed_frames_by_hand():
    recorded = np.arange(21, dtype=np.uint8)[:, None]  # frame t holds t
    imagined = 100 + np.arange(1, 21, dtype=np.uint8)[:, None]  # imagined frame t holds 100 + t
    mixed = mixed_frames(recorded, imagined, 8)[:, 0].tolist()
    assert mixed == [0, 101, 102, 103, 104, 105, 106, 107, 108] + list(range(9, 21))


def test_clips_hold_imagined_context_and_recorded_targets():
    model = tiny_world_model().eval()
    eps = [_episode(20, 0), _episode(8, 1)]  # chunks after the first: starts 8, 16; none
    lat, act = own_context_clips(model, eps, num_inference_steps=2, seed=3)
    assert lat.shape == (2, 16, 4, 4, 4) and act.shape == (2, 13, 7)
    imagined = imagined_replays(model, eps, 2, seed=3)[0]  # the same replay, again
    for k, s in enumerate((8, 16)):
        frames = np.concatenate([eps[0].frames[:1], imagined[:s], eps[0].frames[s + 1:]])
        by_hand = build_clips([Episode(frames, eps[0].actions, eps[0].success_labels, "task")])
        i = by_hand.start.tolist().index(s)
        # clip frames: [x_0 ; imagined x̂_{s-3} .. x̂_s ; recorded x_{s+1} .. x_{s+8}]
        assert torch.equal(by_hand.frames[i, 1:5], torch.from_numpy(imagined[s - 4:s]))
        targets = [min(s + 1 + j, 20) for j in range(8)]  # past the end: the last frame
        assert torch.equal(by_hand.frames[i, 5:], torch.from_numpy(eps[0].frames[targets]))
        assert torch.allclose(lat[k], encode_clips(model, by_hand)[i], atol=1e-6)
        assert torch.equal(act[k], by_hand.actions[i])
    empty, _ = own_context_clips(model, [_episode(8, 1)], 2, seed=3)
    assert empty.numel() == 0


def test_trainer_option_mixes_own_clips_and_is_off_by_default():
    eps = [_episode(24, 0), _episode(24, 1)]
    clips = build_clips(eps)

    def losses(**settings):
        model = tiny_world_model()
        model.eval()
        lat = encode_clips(model, clips)
        trainer = WorldModelFinetune(model, objective={"preset": "tabletop"}, lr=1e-3,
                                     num_inference_steps=2, **settings)
        gen = torch.Generator().manual_seed(0)
        return trainer.fit_latents(lat, clips.actions, 3, 4, gen, episodes=eps)

    off = losses()
    # off: the episodes are not touched, the stream of draws is the plain one
    model = tiny_world_model()
    lat = encode_clips(model.eval(), clips)
    plain = WorldModelFinetune(model, objective={"preset": "tabletop"}, lr=1e-3,
                               num_inference_steps=2).fit_latents(
        lat, clips.actions, 3, 4, torch.Generator().manual_seed(0))
    assert off == plain
    on = losses(own_context_fraction=0.5, own_context_refresh=2, own_context_episodes=1)
    assert len(on) == 3 and all(np.isfinite(on)) and on != off
    with pytest.raises(ConfigError, match="own_context_fraction"):
        WorldModelFinetune(tiny_world_model(), own_context_fraction=0.5).fit_latents(
            lat, clips.actions, 1, 4, torch.Generator())
    with pytest.raises(ConfigError, match="must be in"):
        WorldModelFinetune(tiny_world_model(), own_context_fraction=1.0)
