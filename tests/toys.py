"""Small test-only parts that follow the wmrl contracts, for testing the trainer machinery
(GRPO math + Lightning + Ray) on a problem whose optimum is known by hand.

``ReachEnv``: each env holds a target bin per action dim (from its group's initial state);
the image shows the targets as pixel intensities. The episode succeeds (reward 1, then
termination) on the first chunk whose mean |action - target| is below ``tolerance``.
``LinearBinPolicy``: an independent softmax over 256 bins per action token, conditioned
on the image through one linear layer - just enough for GRPO to raise the success rate.
``assert_reward_contract``: the reward contract, checked by calling the reward.
Ray actors import this module: it imports no Lightning (``GivenRollouts``, a DataModule, is
in ``wmrl.rollout.given``, re-exported here on first use).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from wmrl.interfaces import PolicySample

N_BINS = 256
CENTRES = torch.linspace(-1, 1, 2 * N_BINS + 1)[1::2]  # bin centres of [-1, 1]


class LinearBinPolicy(nn.Module):
    def __init__(self, chunk: int = 8, action_dim: int = 7, image_size: int = 8):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.tokens = chunk * action_dim
        self.image_size = image_size
        self.bias = nn.Parameter(torch.zeros(self.tokens, N_BINS))
        self.proj = nn.Linear(3 * image_size * image_size, self.tokens * N_BINS)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def logits(self, obs: dict) -> torch.Tensor:
        x = obs["image"].float().flatten(1) / 255.0
        return self.bias + self.proj(x).view(-1, self.tokens, N_BINS)

    def sample(self, obs, temperature, generator=None) -> PolicySample:
        logp = torch.log_softmax(self.logits(obs) / temperature, dim=-1)
        b = logp.shape[0]
        tokens = torch.multinomial(logp.exp().view(-1, N_BINS), 1, generator=generator)
        tokens = tokens.view(b, self.tokens)
        actions = CENTRES.to(tokens.device)[tokens].view(b, self.chunk, self.action_dim)
        return PolicySample(tokens, actions, logp.gather(-1, tokens[..., None]).squeeze(-1))

    def log_probs(self, obs, tokens, temperature, return_entropy=False):
        logp = torch.log_softmax(self.logits(obs) / temperature, dim=-1)
        out = logp.gather(-1, tokens[..., None]).squeeze(-1)
        if return_entropy:
            return out, -(logp.exp() * logp).sum(-1)
        return out


class ReachEnv:
    def __init__(self, num_envs: int, group_size: int, chunk: int = 8,
                 max_episode_steps: int = 16, action_dim: int = 7, image_size: int = 8,
                 tolerance: float = 0.5):
        self.num_envs, self.group_size, self.chunk = num_envs, group_size, chunk
        self.max_episode_steps, self.action_dim = max_episode_steps, action_dim
        self.image_size, self.tolerance = image_size, tolerance

    def reset(self, seed=None):
        g = torch.Generator().manual_seed(seed or 0)
        groups = self.num_envs // self.group_size
        target = torch.rand(groups, self.action_dim, generator=g) - 0.5  # in [-.5, .5]
        self.target = target.repeat_interleave(self.group_size, 0)
        self.t = 0
        self.done = torch.zeros(self.num_envs, dtype=torch.bool)
        self.success = torch.zeros(self.num_envs, dtype=torch.bool)
        return self._obs()

    def _obs(self):
        level = ((self.target + 1) * 127.5).round().to(torch.uint8)  # [B, D]
        img = torch.zeros(self.num_envs, self.image_size, self.image_size, 3, dtype=torch.uint8)
        img.view(self.num_envs, -1)[:, : self.action_dim] = level
        return {"image": img, "task": ["reach"] * self.num_envs}

    def chunk_step(self, actions):
        err = (actions - self.target[:, None, :]).abs().mean(dim=(1, 2))
        hit = (err < self.tolerance) & ~self.done
        rewards = torch.zeros(self.num_envs, self.chunk)
        terms = torch.zeros(self.num_envs, self.chunk, dtype=torch.bool)
        rewards[:, -1] = hit.float()
        terms[:, -1] = hit
        self.success |= hit
        self.done |= hit
        self.t += self.chunk
        truncs = torch.zeros_like(terms)
        if self.t >= self.max_episode_steps:
            truncs[:, -1] = ~self.done
        return self._obs(), rewards, terms, truncs, {"success": self.success.clone()}


class LearnedReachEnv(ReachEnv):
    """ReachEnv standing in for a world-model env: it takes new "world-model" weights
    (``load_world_model_weights``, the contract PACE pushes through) and keeps them."""

    world_model: dict | None = None

    def load_world_model_weights(self, state_dict, version, reward_state_dict=None):
        self.world_model = state_dict
        return version


class CrashingReachEnv(LearnedReachEnv):
    """ReachEnv whose process dies (``os._exit``, as an OOM kill ends it) in its
    ``crash_at``-th ``chunk_step``. With a ``marker`` path only the first process to get there
    dies (it creates the file atomically), so the restarted actor runs on; without one every
    incarnation dies."""

    def __init__(self, *args, crash_at: int = 3, marker: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.crash_at, self.marker, self.calls = crash_at, marker, 0

    def chunk_step(self, actions):
        self.calls += 1
        if self.calls == self.crash_at:
            if self.marker is None:
                os._exit(1)
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
                os._exit(1)
            except FileExistsError:
                pass
        return super().chunk_step(actions)


def expert_actions(task: str, state_id: int, n: int):
    """The clean scripted expert's actions on the tabletop eval state ``state_id`` of ``task``
    (its episode ends on success), zero-padded to ``n`` [n, 7]: replayed open loop, in chunks
    or not, they retrace the same episode."""
    import numpy as np

    from wmrl.sim.expert import ScriptedExpert
    from wmrl.sim.tabletop import TabletopEnv

    e = TabletopEnv(render=False, max_episode_steps=n)
    obs, _ = e.reset(options={"task": task, "state_id": state_id})
    expert = ScriptedExpert()
    expert.reset(1, seed=0)
    acts, done = [], False
    while not done:
        acts.append(expert.act(obs)[0])
        obs, _, term, trunc, _ = e.step(acts[-1])
        done = term or trunc
    return np.concatenate([np.stack(acts), np.zeros((n - len(acts), 7))])


def assert_reward_contract(reward, tasks: list[str], chunk: int = 2, height: int = 32,
                           width: int | None = None) -> torch.Tensor:
    """The reward contract checked by calling it (a runtime_checkable Protocol admits any
    callable): random uint8 frames [B, C, H, W, 3] (seed 0) and B task strings -> float
    scores [B, C] in [0, 1]; returns the scores."""
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (len(tasks), chunk, height, width or height, 3),
                           dtype=torch.uint8, generator=g)
    scores = reward(frames, tasks)
    assert scores.shape == (len(tasks), chunk) and scores.is_floating_point(), scores
    assert bool(((scores >= 0) & (scores <= 1)).all()), scores
    return scores


def count_renders(monkeypatch) -> list:
    """Patch ``TabletopEnv.render`` to record the env of every call; returns the record."""
    from wmrl.sim.tabletop import TabletopEnv

    calls, real = [], TabletopEnv.render

    def counted(self):
        calls.append(id(self))
        return real(self)

    monkeypatch.setattr(TabletopEnv, "render", counted)
    return calls


def __getattr__(name):
    """``GivenRollouts`` (a Lightning DataModule, ``wmrl.rollout.given``) on first use: Ray
    actors import this module to build the toy policy and env, and Lightning would add
    seconds to every actor start."""
    if name == "GivenRollouts":
        from wmrl.rollout.given import GivenRollouts

        return GivenRollouts
    raise AttributeError(f"module 'toys' has no attribute {name!r}")
