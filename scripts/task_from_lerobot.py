"""Your own task from a LeRobot dataset, in one command: reset states, a reward, a world model.

    python scripts/task_from_lerobot.py /data/my_dataset --out my_task \
        --world-model wmrl/assets/world_model --size 64 [--camera KEY] [--kir] \
        [--last-frames K] [--reward-set KEY=VALUE ...] [--world-model-set KEY=VALUE ...]

Stages, each one of the project's scripts as a subprocess (their configs hold the settings;
``--reward-set`` / ``--world-model-set`` pass Hydra overrides to the last two):

1. ``scripts/import_lerobot.py``: ``<out>/initial_states/`` (each episode's first frame and
   task; with ``--kir`` keyframe states too) and ``<out>/dataset/`` (RLinf's layout);
2. ``scripts/train_reward.py data_format=lerobot``: ``<out>/reward/``, the ResNet success
   classifier on the dataset's ``next.success`` (or, ``--last-frames K``, the last K frames of
   every episode: demonstrations that record no outcome; its run dir ``<out>.runs/reward``);
3. ``scripts/finetune_world_model.py``: ``<out>/world_model/``, the world model ``--world-model``
   fine-tuned on the dataset (WoVR's objective; its run dir, for ``ckpt_path=last``, is
   ``<out>.runs/world_model``).

The inputs are checked first (the dataset's metadata and files, the camera, the world model's
files); the stages write into a temporary folder that becomes ``<out>`` only when all three
have finished, so a failed command leaves no half-made task. Then it prints the
``scripts/fit.py`` command that trains on the task.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wmrl.asset_checks import check_world_model  # noqa: E402
from wmrl.errors import ConfigError  # noqa: E402
from wmrl.io.atomic import atomic_dir, check_output_dir  # noqa: E402
from wmrl.lerobot.dataset import LeRobotDataset  # noqa: E402


def stage_commands(a: argparse.Namespace, tmp: Path, size: tuple[int, int]) -> dict[str, list]:
    py = sys.executable
    cam = [f"--camera={a.camera}"] if a.camera else []
    importer = [py, str(ROOT / "scripts/import_lerobot.py"), str(a.dataset), "--out", str(tmp),
                "--size", str(size[0]), str(size[1]), *cam, *(["--kir"] if a.kir else [])]
    reward = [py, str(ROOT / "scripts/train_reward.py"), "data_format=lerobot",
              f"data_dir={a.dataset}", f"out_dir={tmp / 'reward'}",
              f"lerobot.camera={a.camera or 'null'}",
              f"lerobot.last_frames={a.last_frames if a.last_frames else 'null'}",
              f"model.image_size=[{size[0]},{size[1]}]", f"task.image_size=[{size[0]},{size[1]}]",
              f"hydra.run.dir={a.out}.runs/reward", *a.reward_set]
    finetune = [py, str(ROOT / "scripts/finetune_world_model.py"),
                f"world_model.path={a.world_model}", "data.format=lerobot",
                f"data.paths=[{a.dataset}]", f"data.size=[{size[0]},{size[1]}]",
                f"data.camera={a.camera or 'null'}", f"out_dir={tmp / 'world_model'}",
                f"hydra.run.dir={a.out}.runs/world_model", *a.world_model_set]
    return {"reset states": importer, "reward": reward, "world model": finetune}


def fit_command(out: Path, size: tuple[int, int]) -> str:
    """``scripts/fit.py`` on the task: its world model, reward and reset states; no simulator
    evaluation (a LeRobot task has no simulator here)."""
    args = [f"env.world_model.path={out / 'world_model'}",
            f"env.initial_states={out / 'initial_states'}", f"reward.checkpoint={out / 'reward'}",
            f"task.image_size=[{size[0]},{size[1]}]", "callbacks.sim_eval=null"]
    return " ".join(["python", "scripts/fit.py", *map(shlex.quote, args)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dataset", type=Path, help="a LeRobot dataset folder (meta/, data/, videos/)")
    p.add_argument("--out", type=Path, required=True, help="the task folder to write (new, "
                   "empty or an earlier task)")
    p.add_argument("--force", action="store_true",
                   help="replace --out even if it holds other files (they are deleted)")
    p.add_argument("--world-model", type=Path, required=True,
                   help="the world model to start from (an imported WoVR directory, ours, ...)")
    p.add_argument("--size", type=int, nargs="+", required=True,
                   help="frame size the world model takes: S (square) or H W")
    p.add_argument("--camera", help="the video key (default: the dataset's first camera)")
    p.add_argument("--kir", action="store_true", help="keyframe reset states too (RLinf's KIR)")
    p.add_argument("--last-frames", type=int, default=None,
                   help="reward: the last K frames of each episode are its successes (for "
                        "demonstrations that record no next.success)")
    p.add_argument("--reward-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides of conf/train_reward.yaml")
    p.add_argument("--world-model-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides of conf/finetune_world_model.yaml")
    a = p.parse_args(argv)
    try:
        check_output_dir(a.out, "task_from_lerobot", a.force)
        if len(a.size) not in (1, 2) or min(a.size) <= 0:
            raise ConfigError(f"--size {a.size}: give S or H W, positive")
        size = (a.size[0], a.size[-1])
        ds = LeRobotDataset(a.dataset, camera=a.camera, size=size)  # metadata and files
        if ds.num_episodes < 2:
            raise ConfigError(f"{a.dataset} holds {ds.num_episodes} episode: the world model's "
                              "fine-tune holds the last one out, so give at least 2")
        check_world_model(str(a.world_model), key="--world-model")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{ds}: {ds.num_episodes} episodes -> {a.out}", flush=True)
    with atomic_dir(a.out, "task_from_lerobot") as tmp:
        for name, cmd in stage_commands(a, tmp, size).items():
            print(f"[{name}] {' '.join(map(shlex.quote, cmd))}", flush=True)
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            if rc != 0:
                print(f"error: the {name} stage failed (exit {rc}); nothing was written to "
                      f"{a.out}", file=sys.stderr)
                raise SystemExit(rc)
        for folder in ("initial_states", "reward", "world_model"):
            if not (tmp / folder).is_dir():
                raise RuntimeError(f"the stages left no {folder}/ in {tmp}")
    print(f"task -> {a.out}\nfit on it:\n  {fit_command(a.out, size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
