"""``Pace``: the world model follows the policy (WoVR's PACE), a part of the RL step.

``GRPOModule`` holds one (config group ``pace``) and, after every ``every_n_steps``-th
training step (``round_due``), runs a round (``run_round``): the trainer's current policy runs
``episodes`` real episodes in the MuJoCo tabletop simulator; this object's own copy of the
world model (loaded from ``world_model``, the config the env actors load) fine-tunes its
transformer + action modules on them for ``steps`` steps (flow matching, the VAE frozen;
optionally the reward model too, ``reward_steps``: on the real frames, or with
``reward_frames=imagined`` on the refined world model's replays of the episodes, scored on a
held-out share, wmrl/finetune/reward_on_imagination.py); the new weights go to every env actor
(``RolloutDataModule.sync_world_model``, versioned like the policy's weights) and GRPO goes on
in the updated world model. docs/pace.md.

Budget: every real episode and control step a round spends is counted in ``self.ledger``
(``wmrl/pace/ledger.py``: ``pace/*`` counts every step, ``summary.json``, ``history.jsonl``).

Processes: the episodes are collected and the world model trained in the trainer process of
rank 0; with several ranks the new weights go to every rank (``broadcast``, e.g. the
strategy's) and every rank pushes them to its own env actors, so all ranks roll out in the
same world model. The policy must be whole on rank 0 (``GRPOModule`` refuses sharded FSDP
policies with PACE on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from wmrl.build import build
from wmrl.errors import require_choice
from wmrl.finetune import reward_on_imagination as R
from wmrl.finetune import world_model as T
from wmrl.finetune.reward_trainer import finetune_reward_model
from wmrl.finetune.world_model_module import WorldModelFinetune
from wmrl.pace.ledger import PaceLedger, round_metrics
from wmrl.schema import REWARD_FRAMES, SCENES, PaceConfig
from wmrl.sim.dataset import Episode
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import TabletopVecEnv, task_by_name
from wmrl.world_model.action_wan import ActionWanModel

# what the fine-tune trains (the world-model trainer's part=dit, no LoRA) and what is synced
TRAINED_PARTS = ("transformer.", "action.")


def trained_state(model: ActionWanModel) -> dict[str, torch.Tensor]:
    """The transformer + action-module weights of ``model`` (CPU tensors, VAE left out)."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items()
            if k.startswith(TRAINED_PARTS)}


def episode_specs(tasks: Sequence[str], episodes: int, round_index: int, scenes: str,
                  num_states: int, seed: int) -> list[EpisodeSpec]:
    """Round ``round_index``'s episodes: tasks in turn; ``fixed``: the task's fixed initial
    states, consecutive rounds taking the next ``episodes`` of them (wrapping at
    ``num_states``); ``random``: fresh scenes from seeded env RNGs (a distinct seed per round
    and episode)."""
    specs = []
    for j in range(episodes):
        n = round_index * episodes + j
        task = task_by_name(tasks[j % len(tasks)]).name
        if scenes == "fixed":
            specs.append(EpisodeSpec(task, state_id=(n // len(tasks)) % num_states))
        else:
            specs.append(EpisodeSpec(task, seed=(seed * 1_000_003 + n) % (2**31 - 1)))
    return specs


def _window_mean(xs: list[float], first: bool) -> float:
    """Mean over the first / last tenth of the steps (at least 1, at most 20)."""
    k = min(20, max(1, len(xs) // 10))
    w = xs[:k] if first else xs[-k:]
    return float(np.mean(w)) if w else float("nan")


def _reward_line(row: dict) -> str:
    """The reward's held-out episode precision / recall on imagined frames, before -> after."""
    if "reward_episode_precision_before" not in row:
        return ""
    b, a = "reward_episode_precision_", "reward_episode_recall_"
    return (f" | reward on held-out replays: precision {row[b + 'before']:.2f} -> "
            f"{row[b + 'after']:.2f}, recall {row[a + 'before']:.2f} -> {row[a + 'after']:.2f}")


class Pace:
    """See the module docstring. ``settings``: every scalar setting, keyword arguments (the
    ``pace`` group's keys) taken as one ``wmrl.schema.PaceConfig`` (``self.settings``: the one
    source of their defaults and ranges; conf/pace/default.yaml explains each). The rest are
    other groups' specs, read as they are: ``world_model``: the env's ``world_model`` config
    (``path`` or tiny sub-configs); ``tasks`` / ``sim_env``: the simulator task(s) and
    ``TabletopEnv`` kwargs; ``reward``: the env's reward config (only for ``reward_steps`` > 0).

    ``ledger``: the simulator budget, the world-model version and one dict per round.
    ``state_dict()`` holds the ledger and, after a round, the fine-tuned weights and optimizer
    state, so a resumed run continues them (the clip buffer is not saved: a resume starts it
    empty)."""

    def __init__(self, world_model: dict, tasks: Sequence[str], sim_env: dict | None = None,
                 reward: Any = None, **settings: Any):
        cfg = self.settings = PaceConfig.of(settings)
        if not tasks:
            raise ValueError("pace.tasks is empty: name the simulator task(s)")
        require_choice("pace.scenes", cfg.scenes, SCENES)
        require_choice("pace.reward_frames", cfg.reward_frames, REWARD_FRAMES)
        if cfg.reward_steps > 0 and reward is None:
            raise ValueError("pace.reward_steps > 0 needs the reward config (pace.reward)")
        self.world_model_cfg = dict(world_model, dtype=cfg.dtype)
        self.tasks = [task_by_name(t).name for t in tasks]
        self.sim_env = dict(sim_env or {})
        self.sim_env.pop("_target_", None)
        self.sim_env.setdefault("terminate_on_success", cfg.post_success_steps is None)
        # the fine-tune is the world-model trainer (the tabletop's objective and optimizer,
        # gradients clipped to 1, a constant lr), stepped here on the round's clip buffer
        self.finetuner = WorldModelFinetune(
            self.world_model_cfg, objective={"preset": "tabletop",
                                             "context_noise_sigma": cfg.context_noise_sigma,
                                             "foreground_weight": cfg.foreground_weight},
            lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99), grad_clip=1.0,
            gripper_event_weight=cfg.gripper_event_weight,
            num_inference_steps=cfg.num_inference_steps,
            own_context_fraction=cfg.own_context_fraction,
            own_context_refresh=cfg.own_context_refresh,
            own_context_episodes=cfg.own_context_episodes, seed=cfg.seed)
        self.reward_spec = reward
        self.ledger = PaceLedger(cfg.out_dir, cfg.verbose)  # the budget, the version (saved)
        # built on first use
        self.model: ActionWanModel | None = None
        self.reward = None
        self.reward_optimizer: torch.optim.Optimizer | None = None
        self._buffer: list[tuple[torch.Tensor, torch.Tensor]] = []  # (latents, actions)/round
        self._pending: dict | None = None  # weights from load_state_dict, before the build
        self._received: tuple | None = None  # ranks > 0: the weights rank 0 broadcast last
        self.losses: list[float] = []  # the last round's fine-tune losses (rank 0)
        self.reward_losses: list[float] = []

    # ---- models ------------------------------------------------------------------------
    def ensure_models(self, device: torch.device | str | None = None) -> ActionWanModel:
        """Build the world-model copy (+ optimizer, + reward copy) once; apply restored state."""
        if self.model is None:
            dev = torch.device(self.settings.device or device or "cpu")
            self.finetuner.configure_model()
            self.model = self.finetuner.model.to(dev)
            self.finetuner.begin_training(self.settings.steps)  # one optimizer for every round
            self.model.eval().requires_grad_(False)  # finetune() turns them on for its steps
            if self.settings.reward_steps > 0:
                self.reward = build(self.reward_spec).to(dev)
                self.reward_optimizer = torch.optim.AdamW(self.reward.model.parameters(),
                                                          lr=self.settings.reward_lr)
            if self._pending is not None:
                self._apply_pending(self._pending)
                self._pending = None
        return self.model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The world-model trainer's optimizer (transformer + action modules), kept across
        rounds."""
        return self.finetuner.optimizer

    def _apply_pending(self, sd: dict) -> None:
        if sd.get("world_model") is not None:
            self._load_trained(sd["world_model"])
        if sd.get("optimizer") is not None:
            self.optimizer.load_state_dict(sd["optimizer"])
        if sd.get("reward") is not None and self.reward is not None:
            self.reward.model.load_state_dict(sd["reward"])
            if sd.get("reward_optimizer") is not None:
                self.reward_optimizer.load_state_dict(sd["reward_optimizer"])

    def _load_trained(self, state: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k.startswith(TRAINED_PARTS)]
        if missing or unexpected:
            raise RuntimeError(f"pace: saved world-model weights do not fit the model "
                               f"(missing {missing[:5]}, unexpected {unexpected[:5]})")

    def current_state(self) -> tuple[dict[str, torch.Tensor], dict | None]:
        """(world-model, reward) weights of the current version: the copy's, else those
        received from rank 0 or restored from a checkpoint before the copy was built."""
        if self.model is not None:
            return trained_state(self.model), self.reward_state()
        if self._received is not None:
            return self._received
        if self._pending is not None and self._pending.get("world_model") is not None:
            return self._pending["world_model"], self._pending.get("reward")
        raise RuntimeError("pace: no world-model weights yet (no round ran, none restored)")

    def reward_state(self) -> dict[str, torch.Tensor] | None:
        if self.reward is None:
            return None
        return {k: v.detach().cpu() for k, v in self.reward.model.state_dict().items()}

    # ---- a round -----------------------------------------------------------------------
    def collect(self, policy, round_index: int) -> list[Episode]:
        """``episodes`` real episodes of ``policy`` (eval mode, ``temperature``, seeded by the
        round) in the simulator, with every frame and action."""
        cfg = self.settings
        specs = episode_specs(self.tasks, cfg.episodes, round_index, cfg.scenes, cfg.num_states,
                              cfg.seed)
        was_training = policy.training
        policy.eval()
        seed = (cfg.seed * 7919 + round_index * 104_729) % (2**31 - 1)
        source = PolicyActionSource(policy, temperature=cfg.temperature, seed=seed)
        vec = TabletopVecEnv(min(cfg.num_envs, len(specs)), **self.sim_env)
        try:
            return list(rollout_episodes(vec, source, specs, cfg.post_success_steps, seed=seed))
        finally:
            vec.close()
            policy.train(was_training)

    @torch.no_grad()
    def encode(self, episodes: Sequence[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
        """Training clips of ``episodes`` (``build_clips``: the env's model input) -> their
        normalised VAE latents and actions, on the model's device."""
        model = self.ensure_models()
        h, w = episodes[0].frames.shape[1:3]
        if (h, w) != (self.world_model_cfg.get("height", h), self.world_model_cfg.get("width", w)):
            raise ValueError(f"pace: simulator frames are {h}x{w} but the world model's are "
                             f"{self.world_model_cfg['height']}x{self.world_model_cfg['width']}: "
                             "set pace.sim_env.image_size to the task's image size")
        clips = T.build_clips(episodes)
        latents = T.encode_clips(model, clips)
        return latents, clips.actions.to(latents.device)

    @torch.no_grad()
    def fixed_noise_loss(self, latents: torch.Tensor, actions: torch.Tensor) -> float:
        """Flow-matching loss on (at most ``eval_clips``) clips with a fixed noise draw: the
        same number before and after a fine-tune measures what it changed."""
        self.ensure_models()
        n = min(len(latents), self.settings.eval_clips)
        gen = torch.Generator().manual_seed(self.settings.seed + 12_345)
        total = 0.0
        for i in range(0, n, self.settings.batch_size):
            j = min(i + self.settings.batch_size, n)
            loss = self.finetuner.latent_loss(latents[i:j], actions[i:j], gen)
            total += float(loss) * (j - i)
        return total / max(n, 1)

    def finetune(self, latents: torch.Tensor, actions: torch.Tensor, round_index: int,
                 episodes: Sequence[Episode] | None = None) -> list[float]:
        """``steps`` steps of the world-model trainer (``WorldModelFinetune.fit_latents``: the
        tabletop objective, this object's optimizer kept across rounds, a constant ``lr``) on
        random batches of the clip buffer; returns the loss per step. With
        ``own_context_fraction`` > 0 that share of each batch has the model's own imagined
        context, replayed from ``episodes`` (the round's: what the current policy does)."""
        self.ensure_models()
        gen = torch.Generator().manual_seed(self.settings.seed * 1_000_003 + round_index)
        return self.finetuner.fit_latents(latents, actions, self.settings.steps,
                                          self.settings.batch_size, gen, episodes=episodes)

    def finetune_reward(self, episodes: Sequence[Episode], round_index: int
                        ) -> tuple[list[float], dict[str, float]]:
        """``reward_steps`` steps of the one reward trainer (class-balanced BCE, the gradient
        clipped to 1: ``reward_trainer.finetune_reward_model``) -> (losses, metrics).
        ``reward_frames``:
        ``real``: on the real frames, labelled by the simulator's success predicate;
        ``imagined``: on the refined world model's open-loop replays of the episodes, each
        imagined frame labelled by the simulator frame of the same step, a stratified
        ``reward_holdout`` share of them held out to score the reward before and after
        (``reward_{frame,episode}_{precision,recall}_{before,after}``, at
        ``success_threshold``)."""
        cfg = self.settings
        if cfg.reward_steps <= 0:
            return [], {}
        if cfg.reward_frames == "imagined":
            out = R.fit_reward_to_imagination(
                self.reward, self.reward_optimizer, self.model, episodes, cfg.reward_steps,
                cfg.reward_batch_size, cfg.success_threshold, cfg.reward_holdout,
                cfg.num_inference_steps, seed=cfg.seed * 1_000_033 + round_index)
            metrics = {f"reward_{k}_{when}": v for when in ("before", "after")
                       for k, v in out[when].items()}
            metrics.update(reward_held_out_episodes=out["held_out_episodes"],
                           reward_train_frames=out["train_frames"],
                           reward_train_positive_frames=out["train_positive_frames"])
            return out["losses"], metrics
        frames = torch.from_numpy(np.concatenate([ep.frames for ep in episodes]))
        labels = torch.from_numpy(np.concatenate([ep.success_labels for ep in episodes])).float()
        tasks = [ep.task for ep in episodes for _ in range(len(ep.frames))]
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_033 + round_index)
        return finetune_reward_model(self.reward, self.reward_optimizer, frames, labels, tasks,
                                     cfg.reward_steps, cfg.reward_batch_size, gen), {}

    def run_round(self, policy, rollouts=None, step: int = 0,
                  device: torch.device | str | None = None, rank0: bool = True,
                  broadcast: Callable[[Any], Any] | None = None,
                  policy_weights: Callable[[], dict] | None = None) -> dict[str, float]:
        """One PACE round after training step ``step``: collect (rank 0) -> fine-tune (rank 0)
        -> [``broadcast``] -> push to the env actors of ``rollouts`` (the rollout DataModule,
        every rank). ``device``: where the world-model copy is built (default ``settings.device``,
        else the CPU); ``rank0``: whether this process is rank 0; ``broadcast(obj)``: rank 0's
        ``obj`` on every rank (None: one process); ``policy_weights()``: the policy's weights,
        for a collocated actor restarted meanwhile. Rank 0 appends the round to
        ``history.jsonl`` and prints it. Returns the round's metrics (``pace/*``)."""
        t0 = time.perf_counter()
        ledger = self.ledger
        r = ledger.rounds
        row: dict[str, float] = {}
        state = reward_state = None
        if rank0:  # (other ranks build no world-model copy)
            self.ensure_models(device)
            tc = time.perf_counter()
            episodes = self.collect(policy, r)
            collect_s = time.perf_counter() - tc
            latents, actions = self.encode(episodes)
            before = self.fixed_noise_loss(latents, actions)
            self._buffer = (self._buffer + [(latents, actions)])[-self.settings.buffer_rounds:]
            all_lat = torch.cat([b[0] for b in self._buffer])
            all_act = torch.cat([b[1] for b in self._buffer])
            tf = time.perf_counter()
            losses = self.finetune(all_lat, all_act, r, episodes)
            reward_losses, reward_metrics = self.finetune_reward(episodes, r)
            finetune_s = time.perf_counter() - tf
            after = self.fixed_noise_loss(latents, actions)
            n_steps = int(sum(len(ep) for ep in episodes))
            row = {"episodes": len(episodes), "steps": n_steps,
                   "successes": int(sum(ep.success for ep in episodes)),
                   "clips": len(latents), "buffer_clips": len(all_lat),
                   "finetune_loss_first": _window_mean(losses, True),
                   "finetune_loss": _window_mean(losses, False),
                   "wm_loss_before": before, "wm_loss_after": after,
                   "collect_seconds": collect_s, "finetune_seconds": finetune_s}
            if reward_losses:
                row.update(reward_loss_first=_window_mean(reward_losses, True),
                           reward_loss=_window_mean(reward_losses, False), **reward_metrics)
            self.losses, self.reward_losses = losses, reward_losses  # for tests / inspection
            state, reward_state = self.current_state()
        if broadcast is not None:  # every rank's env actors get rank 0's world model
            row, state, reward_state = broadcast((row, state, reward_state))
            if not rank0:
                self._received = (state, reward_state)
        version = ledger.version + 1
        push_s = self.push(rollouts, version, state, reward_state, policy_weights)
        row = ledger.record(row, step, version, push_s, time.perf_counter() - t0)
        if rank0:
            ledger.write_row(row)
            ledger.say(f"[pace] step {step}: round {r} -> world model v{version}: "
                       f"{row['episodes']} real episodes ({row['steps']} steps, success "
                       f"{row['successes']}/{row['episodes']}), loss on them "
                       f"{row['wm_loss_before']:.4f} -> {row['wm_loss_after']:.4f}, "
                       f"{row['seconds']:.0f} s | total {ledger.real_episodes} episodes / "
                       f"{ledger.real_steps} steps" + _reward_line(row))
        return round_metrics(row)

    def push(self, rollouts, version: int, state: dict | None = None,
             reward_state: dict | None = None,
             policy_weights: Callable[[], dict] | None = None) -> float:
        """The trained weights (default: the copy's current ones) to every env actor of
        ``rollouts`` as ``version``; seconds (0 without a DataModule). ``policy_weights()``:
        the trainer's policy weights, re-sent to a collocated actor that Ray restarted
        meanwhile."""
        if rollouts is None:
            return 0.0
        if not hasattr(rollouts, "sync_world_model"):
            raise TypeError(f"pace: {type(rollouts).__name__} has no sync_world_model: "
                            "PACE needs the RolloutDataModule")
        if state is None:
            state, reward_state = self.current_state()
        return rollouts.sync_world_model(state, version, reward_state,
                                         policy_weights=policy_weights)

    # ---- the run -----------------------------------------------------------------------
    def round_due(self, step: int, max_steps: int = -1) -> bool:
        """A round after every ``every_n_steps``-th step, except after the run's last step:
        no rollout would use its world model, so its real episodes would be spent for nothing
        (and counted against the run's simulator budget)."""
        last = max_steps is not None and max_steps > 0 and step >= max_steps
        every = self.settings.every_n_steps
        return bool(every) and step > 0 and step % every == 0 \
            and step != self.ledger.last_round_step and not last

    def restore_actors(self, rollouts, policy_weights: Callable[[], dict] | None = None,
                       rank0: bool = True) -> None:
        """At the start of a resumed run (version > 0; else nothing): the env actors, built
        from the config's world model, get the restored version."""
        if self.ledger.version > 0:
            self.push(rollouts, self.ledger.version, policy_weights=policy_weights)
            if rank0:
                self.ledger.say(f"[pace] resumed at world-model version {self.ledger.version} "
                                f"({self.ledger.real_episodes} real episodes so far); pushed to "
                                "the env actors")

    def finish(self) -> dict[str, Any]:
        """The end of the fit (rank 0): the ledger's ``summary.json`` and one-line budget."""
        cfg = self.settings
        return self.ledger.finish(
            episodes_per_round=cfg.episodes, every_n_steps=cfg.every_n_steps,
            finetune_steps_per_round=cfg.steps, scenes=cfg.scenes, tasks=self.tasks)

    # ---- checkpoint --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        sd: dict[str, Any] = {**self.ledger.state_dict(), "world_model": None,
                              "optimizer": None, "reward": None, "reward_optimizer": None}
        if self.ledger.version > 0 and self.model is not None:
            sd.update(world_model=trained_state(self.model),
                      optimizer=self.optimizer.state_dict(), reward=self.reward_state(),
                      reward_optimizer=None if self.reward_optimizer is None
                      else self.reward_optimizer.state_dict())
        elif self._pending is not None:  # restored, the copy not built yet: pass it on
            sd.update({k: self._pending.get(k) for k in
                       ("world_model", "optimizer", "reward", "reward_optimizer")})
        elif self._received is not None:  # ranks > 0 (rank 0 writes the checkpoint)
            sd.update(world_model=self._received[0], reward=self._received[1])
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        sd = state_dict
        self.ledger.load_state_dict(sd)
        if self.ledger.version > 0 and sd.get("world_model") is None:
            raise RuntimeError(f"pace: the checkpoint says world-model version "
                               f"{self.ledger.version} but holds no world-model weights")
        if self.model is None:
            self._pending = sd
        else:
            self._apply_pending(sd)
