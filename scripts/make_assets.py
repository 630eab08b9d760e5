"""Regenerate the shipped tiny checkpoints (wmrl/assets/) from scratch, on CPU:

1. simulator data: expert rollouts of the tabletop task at several noise levels (successes and
   failures) + held-out sets, and clean demos for behaviour cloning;
2. the SFT base policy (behaviour cloning on the demos), checked in the simulator;
3. that policy's own simulator rollouts (random scenes for training, the fixed evaluation
   scenes held out): the world model and the reward must be right where RL starts;
4. the world model (VAE, then the action-conditioned transformer) on expert + policy data, and
   the initial states (the simulator's fixed evaluation scenes);
5. the reward classifier on simulator frames and their VAE reconstructions (so it also fires
   on the world model's blurrier frames), labelled by the simulator;
6. the world model's replay check against the simulator with that reward, on the policy's
   held-out rollouts from the evaluation scenes;
7. the reward fitted to the world model's imagination (``reward_on_imagination``, loaded by
   ``experiment=reward_on_imagination``): the reward of stage 5 fine-tuned on the world
   model's open-loop replays of 256 fresh SFT-policy episodes (random scenes of seed 41),
   each imagined frame labelled by the simulator (scripts/fit_reward_to_imagination.py).

    python scripts/make_assets.py [--data DIR] [--assets DIR] [--recipe paced|random_scenes]
    python scripts/make_assets.py --stage reward_on_imagination   # stage 7 alone, on the
                                                                  # assets already in --assets

The default recipe, ``paced`` (the shipped assets), makes them for ``red_of_two`` (two-slot
scenes): expert data at noise 0 / 0.3 / 0.6 with a per-episode top speed in [0.2, 1], a base
policy cloned (no relabelling, 2000 steps) from demonstrators with top speeds in [0.2, 0.7],
so it moves at their mixed pace and often runs out of the 64 steps, and a transformer
trained 8000 steps (the longest stage: it is what makes the world model right enough for RL
to gain, docs/experiments/2026-11-29-paced-recipe.md). ``random_scenes`` is the first recipe
(``red_on_plate``, scenes anywhere; docs/experiments/2026-11-29-first-recipe-red-on-plate.md): RL in its world model does
not learn.

Each stage is one of the project's scripts run as a subprocess (their own configs hold the
hyper-parameters); how long a run takes: docs/running.md (How long it takes).
Each output directory is written atomically by its script, so an interrupted run leaves the
previous assets in place. Before any stage runs, each output folder under ``--assets`` must be
new, empty or an earlier output of its stage (the checked-in assets are, by their files);
one holding anything else is refused in one line (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wmrl.errors import exit_on_config_error  # noqa: E402
from wmrl.io.atomic import check_output_dir  # noqa: E402

# the folders under --assets, the writer of each (wmrl.io.atomic) and the stage that writes it
OUTPUTS = {"policy": "policy", "world_model": "world_model", "initial_states": "initial_states",
           "reward": "reward", "reward_on_imagination": "reward"}
# per recipe: the task, expert noise_std -> seed (held out: seed + 10) of the world model's
# expert data, extra overrides of that data, of the demos, of the SFT run and of the world
# model's training
RECIPES = {
    "random_scenes": {"task": "red_on_plate", "noise": {0.3: 11, 0.6: 12, 0.8: 13, 1.0: 14},
                      "expert": [], "demos": ["collect.episodes_per_task=150"], "sft": [],
                      "world_model": []},
    "paced": {"task": "red_of_two", "noise": {0.0: 11, 0.3: 12, 0.6: 13},
              "expert": ["expert.speed_range=[0.2,1.0]"],
              "demos": ["collect.episodes_per_task=300", "expert.speed_range=[0.2,0.7]",
                        "env.max_episode_steps=200"],  # slow demonstrators finish too
              # the executed (paced) actions are the labels: relabelling with the
              # full-speed expert would clone the expert, not the demonstrators
              "sft": ["relabel_with_expert=false", "steps=2000", "threads=2"],
              # the grasp-timing detail that separates late successes from failures needs
              # about twice the default transformer training (docs/experiments/2026-11-29-paced-recipe.md)
              "world_model": ["transformer_train.steps=8000",
                              "transformer_train.max_seconds=2700"]},
}


def check_outputs(assets: Path, names, force: bool) -> None:
    """Every output folder ``names`` under ``assets`` may be written (before an hour of work)."""
    for name in names:
        check_output_dir(assets / name, OUTPUTS[name], force, key="--assets")


def run(script: str, *overrides: str) -> None:
    cmd = [sys.executable, str(ROOT / "scripts" / script), *overrides]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(ROOT / "data" / "assets"), help="scratch data dir")
    p.add_argument("--assets", default=str(ROOT / "wmrl" / "assets"), help="output dir")
    p.add_argument("--recipe", default="paced", choices=sorted(RECIPES))
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: the "
                   "recipe's task)")
    p.add_argument("--episodes", type=int, default=120, help="train episodes per noise level")
    p.add_argument("--policy-episodes", type=int, default=320,
                   help="SFT-policy rollouts for the world model and reward")
    p.add_argument("--stage", default="all", choices=("all", "reward_on_imagination"),
                   help="all stages, or only the last one on the assets in --assets")
    p.add_argument("--force", action="store_true", help="replace output folders under --assets "
                   "even if they hold other files (they are deleted)")
    args = p.parse_args(argv)
    data, assets = Path(args.data), Path(args.assets)
    exit_on_config_error(check_outputs, assets, OUTPUTS if args.stage == "all"
                         else ["reward_on_imagination"], args.force)
    args.overwrite = ["overwrite=true"] if args.force else []  # to each stage that writes one
    recipe = RECIPES[args.recipe]
    tasks = "[" + (args.tasks or recipe["task"]) + "]"
    t0 = time.time()
    if args.stage == "all":
        make_all(data, assets, recipe, tasks, args)
    reward_on_imagination(data, assets, tasks, args.overwrite)
    print(f"\nassets in {assets} ({(time.time() - t0) / 60:.1f} min)", flush=True)


def policy_source(policy: Path) -> str:
    """collect.py's override that rolls out the SFT policy in ``policy``."""
    return ("collect.policy={_target_: wmrl.policies.openvla_oft.build_policy, "
            f"pretrained_path: {policy}, unnorm_key: tabletop}}")


def reward_on_imagination(data: Path, assets: Path, tasks: str, overwrite: list[str]) -> None:
    """Stage 7 (module docstring): fresh SFT-policy episodes -> the reward fine-tuned on
    their replays in the world model; held-out scores in its metrics.json."""
    fresh = data / "reward_on_imagination_policy"
    run("collect.py", f"collect.out_dir={fresh}", f"collect.tasks={tasks}",
        "collect.episodes_per_task=256", "collect.seed=41", "collect.num_envs=16",
        "collect.overwrite=true", policy_source(assets / "policy"))
    run("fit_reward_to_imagination.py", f"data_dir={fresh}", f"reward_dir={assets / 'reward'}",
        f"world_model_dir={assets / 'world_model'}",
        f"out_dir={assets / 'reward_on_imagination'}", *overwrite)


def make_all(data: Path, assets: Path, recipe: dict, tasks: str, args) -> None:
    """Stages 1-6 (module docstring)."""
    train, val = [], []
    for noise, seed in recipe["noise"].items():
        for split, n, s, dirs in (("train", args.episodes, seed, train),
                                  ("val", 16, seed + 10, val)):
            out = data / f"{split}_n{noise}"
            run("collect.py", f"collect.out_dir={out}", f"collect.tasks={tasks}",
                f"collect.episodes_per_task={n}", f"expert.noise_std={noise}",
                f"expert.seed={s}", f"collect.seed={s}", "collect.overwrite=true",
                *recipe["expert"])
            dirs.append(str(out))
    demos = data / "demos"
    run("collect.py", f"collect.out_dir={demos}", f"collect.tasks={tasks}", "collect.seed=7",
        "collect.overwrite=true", *recipe["demos"])
    policy = assets / "policy"
    run("sft_policy.py", f"data_dir={demos}", f"out_dir={policy}", f"eval.tasks={tasks}",
        *recipe["sft"], *args.overwrite)

    policy_cfg = policy_source(policy)
    for split, n, seed, extra, dirs in (("train", args.policy_episodes, 31, [], train),
                                        ("val", 256, 0, ["collect.use_eval_states=true"], val)):
        out = data / f"{split}_policy"
        run("collect.py", f"collect.out_dir={out}", f"collect.tasks={tasks}",
            f"collect.episodes_per_task={n}", f"collect.seed={seed}", "collect.num_envs=16",
            "collect.overwrite=true", policy_cfg, *extra)
        dirs.append(str(out))

    train_list, val_list = "[" + ",".join(train) + "]", "[" + ",".join(val) + "]"
    world_model, reward = assets / "world_model", assets / "reward"
    run("train_world_model.py", f"train_dirs={train_list}", f"val_dirs={val_list}",
        f"tasks={tasks}", f"out_dir={world_model}",
        f"initial_states.out_dir={assets / 'initial_states'}", *recipe["world_model"],
        *args.overwrite)
    run("train_reward.py", "data_format=trajectories", f"data_dir={train_list}",
        "trajectories.negative_stride=4", f"trajectories.vae_from={world_model}",
        f"out_dir={reward}", "steps=1000", *args.overwrite)
    replay = data / "world_model_replay"  # re-evaluation only: the world model is unchanged
    run("train_world_model.py", f"train_dirs={train_list}", f"val_dirs=[{val[-1]}]",
        f"tasks={tasks}", f"init_from={world_model}", "transformer_train.steps=0",
        f"eval.reward_checkpoint={reward}", "eval.replay_episodes=256",
        f"out_dir={replay}")
    shutil.copy(replay / "metrics.json", world_model / "metrics_replay_reward.json")


if __name__ == "__main__":
    main()
