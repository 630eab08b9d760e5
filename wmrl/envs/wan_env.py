"""``WanWorldModelEnv``: batched, grouped chunk env that imagines frames with the
action-conditioned Wan model and scores them with a reward model (the WoVR / RLinf WanEnv
rollout contract).

One ``chunk_step(actions [B, 8, 7])``:

* the input layout is ``wmrl.world_model.clip_layout``'s (the trainer's clips are built by it):
  clip = 5 condition frames (frame 0 = the episode's initial image, a fixed anchor; frames
  1-4 = the last 4 frames generated) + 8 new frames = 13 frames = 4 latent frames
  (2 condition latents at timestep 0, 2 generated);
* actions for all 13 frames = [5 condition actions ; 8 new actions]; the condition actions
  then become [slot 0 kept ; last 4 of the 13]; after reset they are zeros with gripper -1;
* flow-matching Euler sampler, ``num_inference_steps`` steps, cfg 1.0 (with
  ``context_noise_sigma`` > 0 the DiT sees the condition latents plus that much Gaussian noise,
  the inference side of the training objective's noisy-context augmentation);
* reward model scores the 8 new frames -> s [B, 8] in [0, 1];
* reward shaping (``wmrl.rewards.shaping`` holds the equations): chunk success =
  max_t s_t >= success_threshold, flagged as termination on the chunk's last frame;
  r_t = coef * (s_t - s_{t-1}) with ``use_rel_reward`` (s carried over between chunks), else
  r_t = 1[s_t >= success_threshold];
* truncation on the last frame once episode_len >= max_episode_steps; no auto reset.

``return_frames`` adds info["frames"]: all ``chunk`` new frames, uint8 [B, chunk, H, W, 3]
(zeros for finished rows), e.g. to label imagined frames (wmrl.finetune.reward_data.imagined_frames).

Finished envs are not generated any more: the model runs only on the active rows, outputs keep
their [B, ...] shapes (zeros for finished rows, their last frame as observation).

``resample_check`` (a signal of exploitation that needs no simulator): when an episode ends
(imagined success or truncation), its last chunk is imagined once more from independent noise
(its own RNG stream, so trajectories are unchanged) and scored; info["resample_success"] [B]
is that second verdict. A policy that wins by the world model's luck rather than by its actions
has imagined successes that a second draw does not repeat (``wm/fragile_success``). Costs one
extra chunk per episode. ``resample_return`` (``min`` | ``mean``, rel reward only) also lets
that second draw into the return: the episode's last step reward is shifted so the return is
coef * min (or mean) of the two draws' last-frame scores instead of the first draw's alone, a
pessimistic (or averaged) reading of the chunk that decides the episode
(``wmrl.rewards.shaping.resample_shift``).

Overheads removed, results unchanged: frames stay on the device as uint8; uint8 -> [-1, 1] is
a 256-entry table built on the host with ``wmrl.io.pixels.u8_to_unit_np``; the anchor frame's VAE
encoder state is computed once per episode (``encode_with_anchor`` gives the latents of
encoding the whole clip bit for bit: tests/world_model/test_action_wan.py) and again only when
the set of active envs changes; non-finite latents are checked once per denoising loop.
``reuse_generated_latents`` (off by default, changes results) skips re-encoding the generated
frames and feeds the last generated latent back as condition latent.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from wmrl.envs.initial_states import (
    InitialStates,
    build_initial_states,
    group_state_ids,
    seed_reset_generator,
)
from wmrl.io.pixels import u8_to_unit_np, unit_to_u8_torch
from wmrl.rewards.shaping import RESAMPLE_RETURNS, chunk_success, resample_shift, shape_rewards
from wmrl.world_model.action_wan import ActionWanModel, build_world_model
from wmrl.world_model.clip_layout import CHUNK, CONDITION_FRAMES, reset_actions


def _build_reward(reward):
    if callable(reward) and not hasattr(reward, "keys"):
        return reward
    if reward is not None and "_target_" in reward:
        from hydra.utils import instantiate

        return instantiate(reward)
    raise ValueError(
        "reward must be a callable (frames uint8 [B, C, H, W, 3], tasks) -> scores [B, C] or a "
        f"config with _target_; got {type(reward).__name__}"
    )




class WanWorldModelEnv:
    """See module docstring. ``world_model``: a picklable config dict for
    ``build_world_model`` (``path`` or tiny sub-configs, plus ``height``/``width``) or a model."""

    def __init__(
        self,
        world_model: dict | ActionWanModel,
        reward,
        initial_states,
        num_envs: int,
        group_size: int = 1,
        chunk: int = CHUNK,
        condition_frames: int = CONDITION_FRAMES,
        num_inference_steps: int = 5,
        max_episode_steps: int = 256,
        success_threshold: float = 0.9,
        use_rel_reward: bool = False,
        reward_coef: float = 5.0,
        seed: int = 0,
        reuse_generated_latents: bool = False,
        kir_reset: bool = False,
        height: int | None = None,
        width: int | None = None,
        action_dim: int = 7,
        max_regenerations: int = 3,
        return_frames: bool = False,
        resample_check: bool = False,
        resample_return: str | None = None,
        context_noise_sigma: float = 0.0,
        device: str = "cpu",
    ):
        if num_envs < 1 or group_size < 1 or num_envs % group_size:
            raise ValueError(f"num_envs ({num_envs}) must be a positive multiple of group_size "
                             f"({group_size})")
        wm_cfg = {} if isinstance(world_model, ActionWanModel) else dict(world_model)
        height = height or wm_cfg.get("height")
        width = width or wm_cfg.get("width")
        if not height or not width:
            raise ValueError("image size missing: set world_model.height and world_model.width")
        self.device = torch.device(device)
        self.model = build_world_model(world_model).to(self.device).eval().requires_grad_(False)
        self.reward_model = _build_reward(reward)
        self.num_envs, self.group_size, self.chunk = num_envs, group_size, chunk
        self.condition_frames, self.num_inference_steps = condition_frames, num_inference_steps
        self.max_episode_steps, self.success_threshold = max_episode_steps, success_threshold
        self.use_rel_reward, self.reward_coef = use_rel_reward, float(reward_coef)
        self.reuse_generated_latents = reuse_generated_latents
        self.kir_reset, self.action_dim = kir_reset, action_dim
        self.max_regenerations, self.height, self.width = max_regenerations, height, width
        self.seed, self.return_frames = seed, return_frames
        self.resample_check, self.resample_return = resample_check, resample_return
        if context_noise_sigma < 0:
            raise ValueError(f"env.context_noise_sigma must be >= 0, got {context_noise_sigma}")
        self.context_noise_sigma = float(context_noise_sigma)
        if resample_return not in (None, *RESAMPLE_RETURNS):
            raise ValueError(f"env.resample_return must be null, min or mean; got "
                             f"{resample_return!r}")
        if resample_return and not (resample_check and use_rel_reward):
            raise ValueError("env.resample_return needs env.resample_check=true and "
                             "env.use_rel_reward=true")
        if resample_check and getattr(self.reward_model, "stateful", False):
            raise ValueError("env.resample_check=true needs a stateless reward (this one keeps "
                             "a frame history per env): set env.resample_check=false")

        r = self.model.temporal_ratio
        if (condition_frames - 1) % r or chunk % r:
            raise ValueError(f"condition_frames must be 1 + {r}k and chunk a multiple of {r} "
                             f"(got {condition_frames}, {chunk})")
        self.num_frames = condition_frames + chunk
        self.cond_latents = self.model.latent_frames(condition_frames)
        self.new_latents = chunk // r
        self.latent_hw = self.model.latent_hw(height, width)

        self.states: InitialStates = build_initial_states(initial_states, height, width)
        if kir_reset and not self.states.has_context:
            raise ValueError("kir_reset=True needs context_frames/context_actions in initial_states")
        # uint8 -> [-1, 1] lookup table, computed on the host with the NumPy expression
        self._u8_table = torch.from_numpy(u8_to_unit_np(np.arange(256, dtype=np.uint8))).to(
            self.device
        )
        self._reset_rng = torch.Generator()
        self._noise_rng = torch.Generator(device=self.device)
        self._check_rng = torch.Generator(device=self.device)
        self._context_rng = torch.Generator(device=self.device)
        self._seed_rngs(seed)
        self._has_reset = False
        self._anchor = None
        self._offloaded = False
        self.timings = {"chunk_step": 0.0, "model": 0.0, "reward": 0.0, "check": 0.0,
                        "calls": 0}

    # ------------------------------------------------------------------ helpers
    def _seed_rngs(self, seed: int) -> None:
        seed_reset_generator(self._reset_rng, seed)
        self._noise_rng.manual_seed(int(seed))
        self._check_rng.manual_seed((int(seed) * 7 + 104_729) % (2**63 - 1))
        self._context_rng.manual_seed((int(seed) * 13 + 15_485_863) % (2**63 - 1))

    def _to_unit(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [b, T, H, W, 3] on the device -> float [b, 3, T, H, W] in [-1, 1]."""
        return self._u8_table[frames.long()].permute(0, 4, 1, 2, 3)

    def _zero_cond_actions(self, n: int) -> torch.Tensor:
        return reset_actions(n, self.condition_frames, self.action_dim, self.device)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _obs(self) -> dict:
        # a copy: the env updates its own buffer in place on the next chunk
        return {"image": self._obs_image.clone(), "task": list(self._tasks)}

    # ------------------------------------------------------------------ reset
    @torch.no_grad()
    def reset(self, seed: int | None = None, state_ids=None) -> dict:
        self.onload()
        if seed is not None:
            self._seed_rngs(seed)
        self._state_ids = group_state_ids(state_ids, self.num_envs // self.group_size,
                                          self.group_size, len(self.states), self._reset_rng)
        ids = self._state_ids
        anchor = self.states.frames[ids]
        cond_actions = self._zero_cond_actions(self.num_envs)
        if self.kir_reset:
            ctx = self.states.context_frames[ids]
            if ctx.shape[1] != self.condition_frames - 1:
                raise ValueError(f"KIR context has {ctx.shape[1]} frames, condition_frames-1 = "
                                 f"{self.condition_frames - 1}")
            frames = torch.cat([anchor[:, None], ctx], 1)
            cond_actions[:, 1:] = self.states.context_actions[ids].to(self.device)
        else:
            frames = anchor[:, None].expand(-1, self.condition_frames, -1, -1, -1).contiguous()
        self._cond_actions = cond_actions
        self._tasks = [self.states.tasks[i] for i in ids.tolist()]
        self._frames = frames.to(self.device)
        self._obs_image = self._frames[:, -1].clone()
        b, dev = self.num_envs, self.device
        self._done = torch.zeros(b, dtype=torch.bool, device=dev)
        self._success = torch.zeros(b, dtype=torch.bool, device=dev)
        self._elapsed = torch.zeros(b, dtype=torch.long, device=dev)
        self._returns = torch.zeros(b, device=dev)
        self._prev_scaled = torch.zeros(b, device=dev)
        self._resample_success = torch.zeros(b, dtype=torch.bool, device=dev)
        self._gen_latents = None
        if hasattr(self.reward_model, "reset"):
            self.reward_model.reset()  # new episodes: drop per-env reward history
        self._anchor = self._encode_anchor()
        self._has_reset = True
        return self._obs()

    def _encode_anchor(self, rows: torch.Tensor | None = None):
        """Encoder state after frame 0 for ``rows`` (default all envs); encoded once per
        episode and again only when the set of active envs changes."""
        if rows is None:
            rows = torch.arange(self.num_envs, device=self.device)
        self._anchor_rows = rows
        return self.model.encode_anchor(self._to_unit(self._frames[rows][:, :1]))

    # ------------------------------------------------------------------ step
    def _condition_latents(self, rows: torch.Tensor) -> torch.Tensor:
        """Latents of the clip [anchor ; last generated frames] of the active ``rows``."""
        if not torch.equal(self._anchor_rows, rows):
            # batched convs are not bit-invariant to batch size (e.g. the 48-ch VAE on CPU):
            # re-encode frame 0 for the new active set, as encoding the whole clip would
            self._anchor = self._encode_anchor(rows)
        if self.reuse_generated_latents and self._gen_latents is not None:
            keep = self.cond_latents - 1
            return torch.cat([self._anchor_latent(), self._gen_latents[rows][:, :, -keep:]], 2)
        rest = self._to_unit(self._frames[rows][:, 1:])
        return self.model.encode_with_anchor(self._anchor, rest)

    def _anchor_latent(self) -> torch.Tensor:
        h = self.model.vae.quant_conv(self._anchor.out)
        return self.model.normalize(torch.chunk(h, 2, dim=1)[0])

    def _noised_condition(self, cond: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The condition latents plus ``context_noise_sigma`` * N(0, I), the inference side of
        the objective's ``context_noise_sigma`` (GameNGen's noise augmentation): the model sees
        its own imperfect frames as it saw noised true ones in training. A full-batch draw from
        its own RNG stream (the generation noise is unchanged); decoding keeps the clean ones."""
        if self.context_noise_sigma == 0:
            return cond
        eps = torch.randn((self.num_envs, *cond.shape[1:]), generator=self._context_rng,
                          device=self.device)[rows]
        return cond + self.context_noise_sigma * eps

    def _generate(self, cond: torch.Tensor, actions: torch.Tensor, rows: torch.Tensor):
        c, (h, w) = self.model.latent_channels, self.latent_hw
        shape = (self.num_envs, c, self.new_latents, h, w)
        for attempt in range(self.max_regenerations + 1):
            # full-batch draw: an env's noise does not depend on which envs are still active
            noise = torch.randn(shape, generator=self._noise_rng, device=self.device)[rows]
            try:
                new = self.model.generate(cond, actions, noise, self.num_inference_steps)
            except FloatingPointError:
                continue
            if bool(torch.isfinite(new).all()):  # one check per denoising loop
                return new, attempt
        raise FloatingPointError(
            f"world model produced NaN/Inf latents {self.max_regenerations + 1} times in a row "
            "(check the checkpoint at world_model.path and its dtype; bfloat16 weights loaded as "
            "float16 overflow)"
        )

    @torch.no_grad()
    def chunk_step(self, actions: torch.Tensor):
        if not self._has_reset:
            raise RuntimeError("call reset() before chunk_step()")
        self.onload()
        t0 = time.perf_counter()
        b, c = self.num_envs, self.chunk
        actions = torch.as_tensor(actions)
        if actions.shape != (b, c, self.action_dim):
            raise ValueError(f"actions must be [num_envs, chunk, action_dim] = "
                             f"{(b, c, self.action_dim)}, got {tuple(actions.shape)}")
        actions = actions.to(self.device, torch.float32)
        rewards = torch.zeros(b, c, device=self.device)
        terms = torch.zeros(b, c, dtype=torch.bool, device=self.device)
        truncs = torch.zeros(b, c, dtype=torch.bool, device=self.device)
        scores_full = torch.zeros(b, c, device=self.device)
        chunk_frames = None
        if self.return_frames:
            chunk_frames = torch.zeros(b, c, self.height, self.width, 3, dtype=torch.uint8,
                                       device=self.device)
        active = ~self._done
        rows = active.nonzero().flatten()
        regenerations = 0
        if rows.numel():
            full_actions = torch.cat([self._cond_actions[rows], actions[rows]], 1)
            self._cond_actions[rows, 1:] = full_actions[:, -(self.condition_frames - 1):]

            tm = time.perf_counter()
            cond = self._condition_latents(rows)
            seen = self._noised_condition(cond, rows)  # what the DiT is shown
            new_lat, regenerations = self._generate(seen, full_actions, rows)
            video = self.model.decode(torch.cat([cond, new_lat], 2))[:, :, self.condition_frames:]
            self._sync()
            self.timings["model"] += time.perf_counter() - tm
            if self.reuse_generated_latents:
                if self._gen_latents is None:
                    self._gen_latents = torch.zeros(b, *new_lat.shape[1:], device=self.device)
                self._gen_latents[rows] = new_lat

            new_frames = video.permute(0, 2, 3, 4, 1)  # [b, C, H, W, 3]
            new_u8 = unit_to_u8_torch(new_frames)
            self._frames[rows, 1:] = new_u8[:, -(self.condition_frames - 1):]
            self._obs_image[rows] = new_u8[:, -1]
            if chunk_frames is not None:
                chunk_frames[rows] = new_u8
            tasks = [self._tasks[i] for i in rows.tolist()]
            tr = time.perf_counter()
            scores = self._score(new_u8, tasks, rows)
            self.timings["reward"] += time.perf_counter() - tr
            scores_full[rows] = scores
            shaped = shape_rewards(scores, self._prev_scaled[rows], self.success_threshold,
                                   self.use_rel_reward, self.reward_coef)
            rewards[rows], self._prev_scaled[rows] = shaped.rewards, shaped.last_scaled
            success = shaped.success
            self._elapsed[rows] += c
            trunc = self._elapsed[rows] >= self.max_episode_steps
            terms[rows, -1] = success
            truncs[rows, -1] = trunc
            self._success[rows] |= success
            self._done[rows] |= success | trunc
            self._returns[rows] += rewards[rows].sum(1)
            ending = (success | trunc).nonzero().flatten()
            if self.resample_check and ending.numel():
                tc = time.perf_counter()
                ended = rows[ending]
                again = self._resample_scores(
                    cond[ending], seen[ending], full_actions[ending], ended,
                    [tasks[i] for i in ending.tolist()])
                self._resample_success[ended] = chunk_success(again, self.success_threshold)
                if self.resample_return:
                    shift = resample_shift(scores[ending, -1], again[:, -1],
                                           self.resample_return, self.reward_coef)
                    rewards[ended, -1] += shift
                    self._returns[ended] += shift
                self.timings["check"] += time.perf_counter() - tc
        self.timings["chunk_step"] += time.perf_counter() - t0
        self.timings["calls"] += 1
        info: dict[str, Any] = {
            "success": self._success.clone(),
            "episode_len": self._elapsed.clone(),
            "return": self._returns.clone(),
            "scores": scores_full,
            "active": active,
            "regenerations": regenerations,
        }
        if chunk_frames is not None:
            info["frames"] = chunk_frames
        if self.resample_check:
            info["resample_success"] = self._resample_success.clone()
        return self._obs(), rewards, terms, truncs, info

    def _resample_scores(self, cond: torch.Tensor, seen: torch.Tensor, actions: torch.Tensor,
                         rows: torch.Tensor, tasks: list[str]) -> torch.Tensor:
        """Reward scores [len(rows), chunk] of the same chunk imagined again from independent
        noise (``resample_check``); a non-finite draw scores as a black frame."""
        c, (h, w) = self.model.latent_channels, self.latent_hw
        noise = torch.randn((self.num_envs, c, self.new_latents, h, w),
                            generator=self._check_rng, device=self.device)[rows]
        new = self.model.generate(seen, actions, noise, self.num_inference_steps)
        video = self.model.decode(torch.cat([cond, new], 2))[:, :, self.condition_frames:]
        frames = unit_to_u8_torch(video.permute(0, 2, 3, 4, 1).nan_to_num(-1.0))
        return self._score(frames, tasks, rows)

    def _score(self, frames: torch.Tensor, tasks: list[str], rows: torch.Tensor) -> torch.Tensor:
        # a stateful reward (frame history per env, e.g. TOPReward) must know which env each
        # row is, since finished envs drop out of the batch
        kwargs = {"env_ids": rows} if hasattr(self.reward_model, "reset") else {}
        scores = self.reward_model(frames, tasks, **kwargs)
        scores = torch.as_tensor(scores).to(self.device, torch.float32)
        if scores.shape != frames.shape[:2]:
            raise ValueError(f"reward model returned shape {tuple(scores.shape)}, expected "
                             f"[B, chunk] = {tuple(frames.shape[:2])}")
        return scores

    # ------------------------------------------------------------------ memory
    _STATE_TENSORS = ("_cond_actions", "_done", "_success", "_elapsed", "_returns",
                      "_prev_scaled", "_resample_success", "_gen_latents", "_u8_table")

    def _move_state(self, device) -> None:
        for name in self._STATE_TENSORS:
            v = getattr(self, name, None)
            if torch.is_tensor(v):
                setattr(self, name, v.to(device))
        if getattr(self, "_frames", None) is not None:
            self._frames = self._frames.to(device)
            self._obs_image = self._obs_image.to(device)
        if self._anchor is not None:
            self._anchor = self._anchor.to(device)
            self._anchor_rows = self._anchor_rows.to(device)

    def offload(self) -> None:
        """Move the model, the reward model (if it has ``offload``) and episode tensors to host."""
        if self._offloaded:
            return
        self.model.to("cpu")
        if hasattr(self.reward_model, "offload"):
            self.reward_model.offload()
        self._move_state("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self._offloaded = True

    def onload(self) -> None:
        if not self._offloaded:
            return
        self.model.to(self.device)
        if hasattr(self.reward_model, "onload"):
            self.reward_model.onload()
        self._move_state(self.device)
        self._offloaded = False

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """RNG and episode state (CPU tensors); the model weights are not included."""
        sd: dict[str, Any] = {
            "reset_rng": self._reset_rng.get_state(),
            "noise_rng": self._noise_rng.get_state(),
            "check_rng": self._check_rng.get_state(),
            "context_rng": self._context_rng.get_state(),
            "has_reset": self._has_reset,
        }
        if self._has_reset:
            sd.update(
                frames=self._frames.cpu(),
                obs_image=self._obs_image.cpu(),
                state_ids=self._state_ids.clone(),
                tasks=list(self._tasks),
                **{k.lstrip("_"): getattr(self, k).cpu() for k in self._STATE_TENSORS[:-2]},
            )
            if self._gen_latents is not None:
                sd["gen_latents"] = self._gen_latents.cpu()
        return sd

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.onload()
        self._reset_rng.set_state(sd["reset_rng"])
        self._noise_rng.set_state(sd["noise_rng"])
        self._check_rng.set_state(sd["check_rng"])
        if "context_rng" in sd:  # (absent from the state of runs before the option)
            self._context_rng.set_state(sd["context_rng"])
        self._has_reset = sd["has_reset"]
        if not self._has_reset:
            return
        frames = sd["frames"]
        if frames.shape[0] != self.num_envs:
            raise ValueError(f"state_dict is for {frames.shape[0]} envs, this env has {self.num_envs}")
        self._frames = frames.to(self.device).clone()
        self._obs_image = sd["obs_image"].to(self.device).clone()
        self._state_ids = sd["state_ids"].clone()
        self._tasks = list(sd["tasks"])
        for k in self._STATE_TENSORS[:-2]:
            setattr(self, k, sd[k.lstrip("_")].to(self.device).clone())
        gl = sd.get("gen_latents")
        self._gen_latents = None if gl is None else gl.to(self.device).clone()
        # the anchor encoder state is a pure function of frame 0 and the active rows
        active = (~self._done).nonzero().flatten()
        self._anchor = self._encode_anchor(active) if active.numel() else None

    # ------------------------------------------------------------------ new weights
    @torch.no_grad()
    def load_world_model_weights(self, state_dict: dict[str, torch.Tensor],
                                 version: int | None = None,
                                 reward_state_dict: dict[str, torch.Tensor] | None = None) -> int:
        """Copy new world-model weights into ``self.model`` in place (PACE: the world model
        follows the policy, ``wmrl/pace/round.py``) and optionally new reward-model weights
        into the reward's network; returns the new ``world_model_version`` (``version``, or
        the old one + 1). ``state_dict`` must hold every transformer and action-module tensor
        (what a fine-tune trains); VAE tensors are optional. Tensors are cast to the model's
        dtype and device; a partial or foreign state dict is refused before any is copied.
        Call between episodes: a running episode would continue on the new weights."""
        own = self.model.state_dict()
        unexpected = sorted(set(state_dict) - set(own))
        missing = sorted(k for k in own if k.startswith(("transformer.", "action."))
                         and k not in state_dict)
        shapes = sorted(k for k, v in state_dict.items()
                        if k in own and tuple(v.shape) != tuple(own[k].shape))
        if unexpected or missing or shapes:
            raise ValueError(f"world-model weights do not fit this env's model: missing "
                             f"{missing[:5]}, unexpected {unexpected[:5]}, shape {shapes[:5]}")
        if reward_state_dict is not None and not isinstance(
                getattr(self.reward_model, "model", None), torch.nn.Module):
            raise TypeError(f"reward {type(self.reward_model).__name__} has no network to load "
                            "weights into")
        self.model.load_state_dict(state_dict, strict=False)
        if reward_state_dict is not None:
            self.reward_model.model.load_state_dict(reward_state_dict)  # (onloads it)
            if self._offloaded and hasattr(self.reward_model, "offload"):
                self.reward_model.offload()
        if self._anchor is not None and any(k.startswith("vae.") for k in state_dict):
            self._anchor = self._encode_anchor(self._anchor_rows)  # new encoder
        old = getattr(self, "world_model_version", 0)
        self.world_model_version = old + 1 if version is None else int(version)
        return self.world_model_version
