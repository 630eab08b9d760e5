"""Policies scored on the held-out scenes (``eval_seed`` 2): the scene set choices are made on.

Results are reported on the training scenes (``task.eval_seed``) and the unseen ones
(``task.unseen_eval_seed``); a choice between arms, run lengths or thresholds looks at neither
(``check_held_out_seed`` refuses them, and the training pool's seed). Here a fit checkpoint and
the base policy are scored alike: success_once in the simulator on ``states`` fixed scenes of
``eval_seed``, sampling at the eval temperature from a seeded generator, through
``conf/eval.yaml`` (``scripts/eval.py``'s config: ``policy=...``, ``num_envs=...`` override it).

``scripts/score_held_out.py`` writes each run's ``held_out.json``; ``scripts/seed_report.py``
reads it as ``gain_held_out`` (paired by seed with ``--against``);
``scripts/choose_run_length.py`` scores every step checkpoint the same way.
"""

from __future__ import annotations

import json
import os

from wmrl.build import to_container
from wmrl.config import ConfigError, check_held_out_seed, compose_config
from wmrl.eval.evaluate import evaluate_eval_config
from wmrl.io.atomic import write_text

FILE = "held_out.json"  # in a run dir, next to sim_eval/


def held_out_config(eval_seed: int = 2, states: int = 256, overrides: list[str] | None = None,
                    purpose: str = "score") -> dict:
    """``conf/eval.yaml`` with ``overrides``, on ``states`` scenes of ``eval_seed``; a scene set
    that results are reported on or trained on is refused (``ConfigError`` naming ``purpose``)."""
    cfg = compose_config("eval", overrides or [])
    check_held_out_seed(cfg.task, eval_seed, purpose)
    out = to_container(cfg)
    out["env"] = dict(out["env"], eval_seed=eval_seed)
    out["episodes_per_task"] = states
    return out


def simulator_success(cfg: dict, ckpt_path: str | None = None) -> float:
    """Success_once of ``cfg``'s policy (with ``ckpt_path``'s weights) over ``cfg``'s scenes."""
    return float(evaluate_eval_config(cfg, ckpt_path, progress="held-out scenes").overall)


def score_runs(runs: list[str], cfg: dict, force: bool = False) -> dict[str, dict]:
    """Each run's ``checkpoints/last.ckpt`` and the base policy on ``cfg``'s scenes, written to
    ``<run>/held_out.json``; a run whose file already holds these scenes and settings is read,
    not rescored (unless ``force``). The base policy is scored once for all of them."""
    where = {"eval_seed": int(cfg["env"]["eval_seed"]), "states": int(cfg["episodes_per_task"]),
             "temperature": float(cfg["temperature"]), "seed": int(cfg["seed"]),
             "num_envs": int(cfg["num_envs"])}  # the batching orders the sampling: part of it
    out, base = {}, None
    for run in runs:
        ckpt = os.path.join(run, "checkpoints", "last.ckpt")
        if not os.path.exists(ckpt):
            raise ConfigError(f"{run}: no checkpoints/last.ckpt (a scripts/fit.py run dir?)")
        path = os.path.join(run, FILE)
        if not force and os.path.isfile(path):
            with open(path) as f:
                old = json.load(f)
            if all(old.get(k) == v for k, v in where.items()):
                out[run] = old
                continue
        if base is None:
            base = simulator_success(cfg)
        out[run] = dict(where, base_success=base, success=simulator_success(cfg, ckpt),
                        ckpt_path=ckpt)
        write_text(path, json.dumps(out[run], indent=1))
    return out


def read_held_out(run: str) -> dict | None:
    """A run's ``held_out.json`` (``score_runs``), or None when it was not scored."""
    path = os.path.join(run, FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)
