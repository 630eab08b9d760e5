"""Training clips whose context is the world model's own imagination (issue 61: a world model
that keeps the scene over a whole episode).

In a fit's episode the world model conditions every chunk after the first on frames it
imagined itself; trained on true frames only, it never learns to pull a drifted context back to
the world (exposure bias: the error compounds chunk after chunk). ``own_context_clips`` makes
the clips that teach it: each episode is replayed open loop through the current model exactly
as a fit runs it (``wmrl.finetune.reward_data.imagined_replays``: ``WanWorldModelEnv`` from the
episode's first frame, fed its recorded actions chunk by chunk), and for every chunk that
starts after s = 8, 16, .. executed actions the clip of ``wmrl.world_model.clip_layout`` is
built on the mixed episode

    x'_t = x_0 (t = 0),  x̂_t (1 <= t <= s: imagined),  x_t (t > s: recorded)

so its 4 context frames are the model's own and its 8 target frames the simulator's: the
objective then asks for the true continuation of an imagined past. No gradient flows through
the replay (the rollout is data, refreshed as the model changes: ``own_context_refresh`` steps
of ``WorldModelFinetune.fit_latents``), which is the cheap end of the family the field uses
(Self Forcing on Wan2.1 back-propagates through the rollout; PersistWorld trains on its own
rollouts with LoRA).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from wmrl.finetune.reward_data import imagined_replays
from wmrl.finetune.world_model import ClipSet, encode_clips
from wmrl.sim.dataset import Episode
from wmrl.world_model.action_wan import ActionWanModel
from wmrl.world_model.clip_layout import CHUNK, build_clip


def mixed_frames(recorded: np.ndarray, imagined: np.ndarray, start: int) -> np.ndarray:
    """An episode's frames (uint8 [T + 1, H, W, 3]) with frames 1..``start`` replaced by
    ``imagined`` ([T, H, W, 3], imagined frame t + 1 at index t, as ``imagined_replays``
    returns them)."""
    return np.concatenate([recorded[:1], imagined[:start], recorded[start + 1:]])


@torch.no_grad()
def own_context_clips(model: ActionWanModel, episodes: Sequence[Episode],
                      num_inference_steps: int, seed: int,
                      chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised latents [N, C, 4, h, w] on the model's device, actions [N, 13, 7]) of the
    clips of every chunk after the first of ``episodes`` (module docstring), their context
    imagined by ``model`` (``num_inference_steps`` Euler steps, noise seeded with ``seed``).
    Episodes of one chunk or less give none; all of them too short: empty tensors."""
    model.eval()
    videos = imagined_replays(model, episodes, num_inference_steps, seed=seed)
    frames, actions, ep_ids, starts = [], [], [], []
    for e, (ep, video) in enumerate(zip(episodes, videos)):
        for s in range(chunk, len(ep), chunk):
            f, a = build_clip(mixed_frames(ep.frames, video, s), ep.actions, s, chunk=chunk)
            frames.append(f)
            actions.append(a)
            ep_ids.append(e)
            starts.append(s)
    if not frames:
        return torch.empty(0), torch.empty(0)
    clips = ClipSet(torch.from_numpy(np.stack(frames)), torch.from_numpy(np.stack(actions)),
                    torch.tensor(ep_ids), torch.tensor(starts))
    return encode_clips(model, clips), clips.actions
