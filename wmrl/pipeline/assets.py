"""The shipped tiny checkpoints rebuilt from scratch (``make assets``; ``scripts/make_assets.py``
is its argument parsing, its docstring the stages and recipes): the output folders under
``assets`` checked before any stage runs, then each stage one of the project's scripts as a
subprocess (their configs hold the hyper-parameters)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from wmrl.io.atomic import check_output_dir, write_text

ROOT = Path(__file__).resolve().parents[2]  # the repository: the stages are its scripts

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
    """One stage: ``scripts/<script>`` with Hydra ``overrides`` as a subprocess, timed."""
    cmd = [sys.executable, str(ROOT / "scripts" / script), *overrides]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)


def policy_source(policy: Path) -> str:
    """collect.py's override that rolls out the SFT policy in ``policy``."""
    return ("collect.policy={_target_: wmrl.policies.openvla_oft.build_policy, "
            f"pretrained_path: {policy}, unnorm_key: tabletop}}")


def reward_on_imagination(data: Path, assets: Path, tasks: str, overwrite: list[str]) -> None:
    """Stage 7 (scripts/make_assets.py's docstring): fresh SFT-policy episodes -> the reward
    fine-tuned on their replays in the world model; held-out scores in its metrics.json."""
    fresh = data / "reward_on_imagination_policy"
    run("collect.py", f"collect.out_dir={fresh}", f"collect.tasks={tasks}",
        "collect.episodes_per_task=256", "collect.seed=41", "collect.num_envs=16",
        "collect.overwrite=true", policy_source(assets / "policy"))
    run("fit_reward_to_imagination.py", f"data_dir={fresh}", f"reward_dir={assets / 'reward'}",
        f"world_model_dir={assets / 'world_model'}",
        f"out_dir={assets / 'reward_on_imagination'}", *overwrite)


def make_all(data: Path, assets: Path, recipe: dict, tasks: str, episodes: int,
             policy_episodes: int, overwrite: list[str]) -> None:
    """Stages 1-6 (scripts/make_assets.py's docstring)."""
    train, val = [], []
    for noise, seed in recipe["noise"].items():
        for split, n, s, dirs in (("train", episodes, seed, train),
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
        *recipe["sft"], *overwrite)

    policy_cfg = policy_source(policy)
    for split, n, seed, extra, dirs in (("train", policy_episodes, 31, [], train),
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
        *overwrite)
    run("train_reward.py", "data_format=trajectories", f"data_dir={train_list}",
        "trajectories.negative_stride=4", f"trajectories.vae_from={world_model}",
        f"out_dir={reward}", "steps=1000", *overwrite)
    replay = data / "world_model_replay"  # re-evaluation only: the world model is unchanged
    run("train_world_model.py", f"train_dirs={train_list}", f"val_dirs=[{val[-1]}]",
        f"tasks={tasks}", f"init_from={world_model}", "transformer_train.steps=0",
        f"eval.reward_checkpoint={reward}", "eval.replay_episodes=256",
        f"out_dir={replay}")
    write_text(world_model / "metrics_replay_reward.json", (replay / "metrics.json").read_text())


def make_assets(data: Path, assets: Path, recipe: str = "paced", tasks: str | None = None,
                episodes: int = 120, policy_episodes: int = 320, stage: str = "all",
                force: bool = False) -> None:
    """Every stage (``stage="all"``) or only ``reward_on_imagination`` (on the assets already
    in ``assets``); ``data`` holds the scratch datasets. Each output folder is checked first
    (``force``: replaced even if it holds other files, passed on as ``overwrite=true``)."""
    data, assets = Path(data), Path(assets)
    check_outputs(assets, OUTPUTS if stage == "all" else ["reward_on_imagination"], force)
    overwrite = ["overwrite=true"] if force else []  # to each stage that writes one
    steps = RECIPES[recipe]
    task_list = "[" + (tasks or steps["task"]) + "]"
    t0 = time.time()
    if stage == "all":
        make_all(data, assets, steps, task_list, episodes, policy_episodes, overwrite)
    reward_on_imagination(data, assets, task_list, overwrite)
    print(f"\nassets in {assets} ({(time.time() - t0) / 60:.1f} min)", flush=True)
