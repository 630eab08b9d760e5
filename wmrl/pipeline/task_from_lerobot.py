"""Your own task from a LeRobot dataset (``scripts/task_from_lerobot.py`` is its argument
parsing, its docstring the stages): the inputs checked, then the project's three scripts run
as subprocesses (reset states, reward, world model) into a temporary folder that becomes
``out`` only once all three have finished."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from wmrl.asset_checks import check_world_model
from wmrl.errors import ConfigError
from wmrl.io.atomic import atomic_dir, check_output_dir
from wmrl.lerobot.dataset import LeRobotDataset

ROOT = Path(__file__).resolve().parents[2]  # the repository: the stages are its scripts
WRITER = "task_from_lerobot"


class StageFailed(RuntimeError):
    """A stage's script exited non-zero (``returncode``); nothing was written to ``out``."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def check_inputs(dataset: Path, out: Path, world_model: Path, size: Sequence[int],
                 camera: str | None = None, force: bool = False) -> LeRobotDataset:
    """``out``, ``size`` (S or H W), the dataset's metadata and files, the camera and the world
    model's files, before any work; a ``ConfigError`` naming the flag otherwise."""
    check_output_dir(out, WRITER, force)
    if len(size) not in (1, 2) or min(size) <= 0:
        raise ConfigError(f"--size {list(size)}: give S or H W, positive")
    ds = LeRobotDataset(dataset, camera=camera, size=(size[0], size[-1]))
    if ds.num_episodes < 2:
        raise ConfigError(f"{dataset} holds {ds.num_episodes} episode: the world model's "
                          "fine-tune holds the last one out, so give at least 2")
    check_world_model(str(world_model), key="--world-model")
    return ds


def stage_commands(dataset: Path, out: Path, tmp: Path, world_model: Path,
                   size: tuple[int, int], camera: str | None = None, kir: bool = False,
                   last_frames: int | None = None, reward_set: Sequence[str] = (),
                   world_model_set: Sequence[str] = ()) -> dict[str, list[str]]:
    """Each stage's command line, writing into ``tmp`` (run dirs beside ``out``)."""
    py = sys.executable
    cam = [f"--camera={camera}"] if camera else []
    importer = [py, str(ROOT / "scripts/import_lerobot.py"), str(dataset), "--out", str(tmp),
                "--size", str(size[0]), str(size[1]), *cam, *(["--kir"] if kir else [])]
    reward = [py, str(ROOT / "scripts/train_reward.py"), "data_format=lerobot",
              f"data_dir={dataset}", f"out_dir={tmp / 'reward'}",
              f"lerobot.camera={camera or 'null'}",
              f"lerobot.last_frames={last_frames if last_frames else 'null'}",
              f"model.image_size=[{size[0]},{size[1]}]", f"task.image_size=[{size[0]},{size[1]}]",
              f"hydra.run.dir={out}.runs/reward", *reward_set]
    finetune = [py, str(ROOT / "scripts/finetune_world_model.py"),
                f"world_model.path={world_model}", "data.format=lerobot",
                f"data.paths=[{dataset}]", f"data.size=[{size[0]},{size[1]}]",
                f"data.camera={camera or 'null'}", f"out_dir={tmp / 'world_model'}",
                f"hydra.run.dir={out}.runs/world_model", *world_model_set]
    return {"reset states": importer, "reward": reward, "world model": finetune}


def fit_command(out: Path, size: tuple[int, int]) -> str:
    """``scripts/fit.py`` on the task: its world model, reward and reset states; no simulator
    evaluation (a LeRobot task has no simulator here)."""
    args = [f"env.world_model.path={out / 'world_model'}",
            f"env.initial_states={out / 'initial_states'}", f"reward.checkpoint={out / 'reward'}",
            f"task.image_size=[{size[0]},{size[1]}]", "callbacks.sim_eval=null"]
    return " ".join(["python", "scripts/fit.py", *map(shlex.quote, args)])


def task_from_lerobot(dataset: str | Path, out: str | Path, world_model: str | Path,
                      size: Sequence[int], camera: str | None = None, kir: bool = False,
                      last_frames: int | None = None, reward_set: Sequence[str] = (),
                      world_model_set: Sequence[str] = (), force: bool = False,
                      log: Callable[[str], None] | None = None) -> str:
    """Check the inputs, run the three stages into ``out`` (whole or not at all); returns the
    ``scripts/fit.py`` command that trains on the task. A bad input is a ``ConfigError``
    before any work, a failed stage ``StageFailed``; ``log`` (default: print,
    flushed) names each stage before its own output."""
    log = log or (lambda msg: print(msg, flush=True))
    dataset, out, world_model = Path(dataset), Path(out), Path(world_model)
    ds = check_inputs(dataset, out, world_model, size, camera, force)
    hw = (size[0], size[-1])
    log(f"{ds}: {ds.num_episodes} episodes -> {out}")
    with atomic_dir(out, WRITER) as tmp:
        commands = stage_commands(dataset, out, tmp, world_model, hw, camera, kir, last_frames,
                                  reward_set, world_model_set)
        for name, cmd in commands.items():
            log(f"[{name}] {' '.join(map(shlex.quote, cmd))}")
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            if rc != 0:
                raise StageFailed(f"the {name} stage failed (exit {rc}); nothing was written "
                                  f"to {out}", rc)
        for folder in ("initial_states", "reward", "world_model"):
            if not (tmp / folder).is_dir():
                raise RuntimeError(f"the stages left no {folder}/ in {tmp}")
    return fit_command(out, hw)
