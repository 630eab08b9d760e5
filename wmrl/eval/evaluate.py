"""Honest evaluation in a simulator (``scripts/eval.py``, ``SimEvalCallback``).

Success is LIBERO's ``success_once`` (the privileged predicate holds at any step) on the fixed
initial states 0..n-1 of every task (``wmrl.sim.tabletop.initial_state``; LIBERO's own 50 per
task with ``vec_env=LiberoVecEnv``), with the policy sampling at the eval temperature from a
seeded generator: the same weights give the same numbers.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from wmrl.build import build
from wmrl.eval.policy_checkpoint import load_policy
from wmrl.io.atomic import atomic_path
from wmrl.measure.stats import rate_with_interval, wilson
from wmrl.sim.episodes import EpisodeSpec, PolicyActionSource, rollout_episodes
from wmrl.sim.tabletop import TASK_NAMES, TabletopVecEnv


@dataclass
class EvalResult:
    success: dict[str, float]  # per task name
    overall: float
    episodes: int
    seconds: float
    videos: list[tuple[str, np.ndarray, bool]] = field(default_factory=list)  # task, frames, ok
    outcomes: dict[str, list[bool]] = field(default_factory=dict)  # per task, per episode

    @property
    def successes(self) -> int:
        return int(sum(o for v in self.outcomes.values() for o in v))

    def interval(self) -> tuple[float, float]:
        """The 95% Wilson interval of the overall success (``wmrl.measure.stats.wilson``)."""
        return wilson(self.successes, self.episodes)

    def describe(self) -> str:
        """``"44.1% [38.2, 50.3] of 256"``: the overall success with its interval."""
        return f"{rate_with_interval(self.successes, self.episodes)} of {self.episodes}"

    def metrics(self, prefix: str = "sim") -> dict[str, float]:
        lo, hi = self.interval()
        out = {f"{prefix}/success": self.overall, f"{prefix}/ci95_low": lo,
               f"{prefix}/ci95_high": hi}
        out.update({f"{prefix}/success_{k}": v for k, v in self.success.items()})
        return out


def evaluate_eval_config(cfg: dict, ckpt_path: str | None = None,
                         progress: str | None = "eval") -> EvalResult:
    """``conf/eval.yaml``'s run (``scripts/eval.py``, ``wmrl.eval.held_out``): its
    ``policy`` with ``ckpt_path``'s weights, on its ``tasks`` and ``episodes_per_task`` scenes
    of its ``env`` (or the ``sim`` vector env, e.g. LIBERO), with its sampling settings."""
    torch.set_num_threads(int(cfg.get("threads") or 1))
    policy = load_policy(cfg["policy"], ckpt_path)
    sim = cfg.get("sim")  # another simulator's vector env spec (sim=libero); None: the tabletop
    return evaluate_policy(policy, tasks=list(cfg["tasks"]),
                           episodes_per_task=int(cfg["episodes_per_task"]),
                           temperature=float(cfg["temperature"]), seed=int(cfg["seed"]),
                           num_envs=int(cfg["num_envs"]), repeats=int(cfg.get("repeats") or 1),
                           num_videos=int(cfg.get("num_videos") or 0),
                           env=None if sim else dict(cfg["env"]), vec_env=sim,
                           progress=progress)


@torch.no_grad()
def evaluate_policy(policy, tasks: list[str] | tuple[str, ...] = TASK_NAMES,
                    episodes_per_task: int = 100, temperature: float = 1.0, seed: int = 0,
                    num_envs: int = 16, repeats: int = 1, num_videos: int = 0,
                    env: dict | None = None, vec_env: dict | None = None,
                    progress: str | None = None) -> EvalResult:
    """Roll ``policy`` out on states 0..episodes_per_task-1 of each task, each state
    ``repeats`` times in a row (repeats > 1 gives groups, as GRPO samples them).
    ``env``: TabletopEnv kwargs (image_size, max_episode_steps, eval_seed, ...) of the
    default simulator, ``TabletopVecEnv``. ``vec_env``: another simulator instead, a
    ``_target_`` spec of a vector env with TabletopVecEnv's interface, built with
    ``num_envs`` (``wmrl.sim.libero_vec.LiberoVecEnv``: conf/sim/libero.yaml); its
    ``task_names`` names the tasks (a LIBERO suite stands for all its tasks). ``progress``: a
    label for a tqdm bar of the episodes on stdout (None: none)."""
    if episodes_per_task < 1 or repeats < 1:
        raise ValueError(f"episodes_per_task and repeats must be >= 1, got "
                         f"{episodes_per_task}, {repeats}")
    if env and vec_env is not None:
        raise ValueError("pass env (TabletopEnv kwargs) or vec_env (another simulator), not both")
    kw = dict(env or {})
    kw.pop("_target_", None)
    kw.setdefault("terminate_on_success", True)
    was_training = policy.training
    policy.eval()
    source = PolicyActionSource(policy, temperature=temperature, seed=seed)
    vec = TabletopVecEnv(num_envs, **kw) if vec_env is None else build(vec_env, num_envs=num_envs)
    t0 = time.perf_counter()
    success, outcomes, videos = {}, {}, []
    bar = None
    try:
        names = vec.task_names(list(tasks), episodes_per_task)
        if progress:
            bar = tqdm(total=len(names) * episodes_per_task * repeats, desc=progress,
                       unit="episode", leave=False, file=sys.stdout, dynamic_ncols=True,
                       mininterval=2.0)  # a log file gets a line every 2 s at most
        for k, name in enumerate(names):
            specs = [EpisodeSpec(name, state_id=i) for i in range(episodes_per_task)
                     for _ in range(repeats)]
            ok = []
            # a distinct seed stream per task, so adding a task leaves the others unchanged
            for j, ep in enumerate(rollout_episodes(vec, source, specs, seed=seed + 7919 * k)):
                ok.append(ep.success)
                if bar is not None:
                    bar.update(1)
                if j < num_videos:
                    videos.append((name, ep.frames, ep.success))
            outcomes[name] = ok
            success[name] = float(np.mean(ok))
    finally:
        if bar is not None:
            bar.close()
        vec.close()
        policy.train(was_training)
    n = sum(len(v) for v in outcomes.values())
    overall = float(np.mean([o for v in outcomes.values() for o in v]))
    return EvalResult(success, overall, n, time.perf_counter() - t0, videos, outcomes)


def mixed_group_fraction(outcomes: list[bool], group_size: int) -> float:
    """Fraction of consecutive groups of ``group_size`` episodes with both outcomes."""
    o = np.asarray(outcomes, dtype=float).reshape(-1, group_size).mean(1)
    return float(np.mean((o > 0) & (o < 1)))


# ---- artifacts --------------------------------------------------------------------------
def save_success_plot(history: list[dict], path: str) -> str:
    """Simulator success (overall and per task) vs training step -> PNG, with the world
    model's own success (``wm/success``, its rollouts since the previous eval) beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.plot(steps, [h["sim/success"] for h in history], "k-o", label="overall", lw=2)
    for key in sorted(k for k in history[0] if k.startswith("sim/success_")):
        ax.plot(steps, [h.get(key, np.nan) for h in history], "--", marker=".",
                label=key.removeprefix("sim/success_"))
    if any("wm/success" in h for h in history):
        ax.plot(steps, [h.get("wm/success", np.nan) for h in history], ":", color="gray",
                marker="s", label="world model (its rollouts)")
    ax.set(xlabel="training step", ylabel="success", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path
