"""``PaceLedger``: what PACE has spent of the simulator and where the world model stands.

Every real episode and control step a round collects is counted (cumulative ``counts``:
``pace/real_episodes``, ``pace/real_steps``, logged every training step) and written to
``<out_dir>/summary.json`` at the end of the fit (``finish``), so a run states the simulator
interaction it used for training (sim-eval episodes score the policy; they are not counted
here). ``<out_dir>/history.jsonl``: one line per round. All of it is checkpointed
(``state_dict``), so a resumed run goes on counting.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from wmrl.io.atomic import write_text

# the reward's held-out scores on imagined frames logged per round (pace/reward_<k>_before|after)
REWARD_METRICS = ("frame_precision", "frame_recall", "frame_auroc", "episode_precision",
                  "episode_recall", "episode_auroc", "episode_wm_success")
# the checkpointed counters, in state_dict order
_COUNTERS = ("version", "rounds", "real_episodes", "real_steps", "real_successes", "seconds",
             "last_round_step")


@dataclass
class PaceLedger:
    """The counters (checkpointed) and the round history; ``out_dir``: where
    ``history.jsonl`` and ``summary.json`` go (None: no files)."""

    out_dir: str | None = None
    verbose: bool = True
    version: int = 0  # the world-model version the env actors hold (0 = as loaded)
    rounds: int = 0
    real_episodes: int = 0
    real_steps: int = 0
    real_successes: int = 0
    seconds: float = 0.0
    last_round_step: int = -1
    history: list[dict] = field(default_factory=list)

    def record(self, row: dict, step: int, version: int, push_seconds: float,
               seconds: float) -> dict:
        """Count round ``self.rounds`` (its ``row``: episodes, steps, successes, ...) that
        ended after training step ``step`` with world model ``version``; returns the row as
        it goes into the history."""
        row = {"step": step, "round": self.rounds, "version": version, **row,
               "push_seconds": push_seconds, "seconds": seconds}
        self.version = version
        self.rounds += 1
        self.real_episodes += int(row["episodes"])
        self.real_steps += int(row["steps"])
        self.real_successes += int(row["successes"])
        self.seconds += seconds
        self.last_round_step = step
        row.update(real_episodes_total=self.real_episodes, real_steps_total=self.real_steps)
        self.history.append(row)
        return row

    def counts(self) -> dict[str, float]:
        """The cumulative simulator budget (logged every training step)."""
        return {"pace/real_episodes": float(self.real_episodes),
                "pace/real_steps": float(self.real_steps),
                "pace/world_model_version": float(self.version),
                "pace/rounds": float(self.rounds)}

    def summary(self, **settings: Any) -> dict[str, Any]:
        """The budget and the round settings that spent it (``summary.json``)."""
        return {"rounds": self.rounds, "real_episodes": self.real_episodes,
                "real_steps": self.real_steps,
                "real_success": self.real_successes / max(self.real_episodes, 1),
                "world_model_version": self.version, "seconds": self.seconds, **settings}

    def finish(self, **settings: Any) -> dict[str, Any]:
        """The end of the fit (rank 0): ``summary.json`` and the one-line budget."""
        s = self.summary(**settings)
        if self.out_dir:
            os.makedirs(self.out_dir, exist_ok=True)
            write_text(os.path.join(self.out_dir, "summary.json"), json.dumps(s, indent=2))
        self.say(f"[pace] simulator budget: {s['real_episodes']} real episodes, "
                 f"{s['real_steps']} control steps in {s['rounds']} rounds (world model "
                 f"v{s['world_model_version']}, {s['seconds']:.0f} s)")
        return s

    def write_row(self, row: dict) -> None:
        """Append ``row`` to ``history.jsonl`` (non-finite floats as null)."""
        if not self.out_dir:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in row.items()}
        with open(os.path.join(self.out_dir, "history.jsonl"), "a") as f:
            f.write(json.dumps(clean) + "\n")

    def say(self, msg: str) -> None:
        if self.verbose:
            print(msg, flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in _COUNTERS}, "history": list(self.history)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        for k in _COUNTERS:
            setattr(self, k, type(getattr(self, k))(sd[k]))
        self.history = list(sd["history"])


def round_metrics(row: dict) -> dict[str, float]:
    """A round's row -> its ``pace/*`` metrics (logged at the step it ran after)."""
    out = {"pace/finetune_loss": row["finetune_loss"],
           "pace/finetune_loss_first": row["finetune_loss_first"],
           "pace/wm_loss_before": row["wm_loss_before"],
           "pace/wm_loss_after": row["wm_loss_after"],
           "pace/round_real_success": row["successes"] / max(row["episodes"], 1),
           "pace/seconds": row["seconds"], "pace/push_seconds": row["push_seconds"]}
    if "reward_loss" in row:
        out["pace/reward_loss"] = row["reward_loss"]
    for k in REWARD_METRICS:  # pace.reward_frames=imagined: held-out imagined frames
        for when in ("before", "after"):
            if f"reward_{k}_{when}" in row:
                out[f"pace/reward_{k}_{when}"] = row[f"reward_{k}_{when}"]
    return out
