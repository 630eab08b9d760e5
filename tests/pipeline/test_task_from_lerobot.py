"""scripts/task_from_lerobot.py (wmrl.pipeline.task_from_lerobot): a LeRobot dataset in; reset
states, a reward and a world model out, in one command; then scripts/fit.py runs on them."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import pushed_square
from wmrl.errors import ConfigError
from wmrl.lerobot.writer import write_lerobot
from wmrl.pipeline.task_from_lerobot import task_from_lerobot

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "task_from_lerobot.py"
TINY = ["--reward-set", "steps=3", "batch_size=8", "--world-model-set", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "module.num_inference_steps=1", "logger=csv"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lerobot") / "ds"
    write_lerobot(root, (pushed_square(i, 17, 64, successes=3) for i in range(3)), fps=10)
    return root


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_bad_inputs_are_one_line_before_any_work(dataset, tmp_path):
    wm = ROOT / "wmrl" / "assets" / "world_model"
    (tmp_path / "notes.txt").write_text("mine")  # a user's folder: refused, not replaced
    cases = {
        "meta/info.json is missing": dict(dataset=tmp_path, out=tmp_path / "t", size=[64]),
        "--world-model": dict(dataset=dataset, out=tmp_path / "t", world_model=tmp_path,
                              size=[64]),
        "wrist": dict(dataset=dataset, out=tmp_path / "t", size=[64], camera="wrist"),
        "(notes.txt): pick a new or empty folder, or pass --force": dict(
            dataset=dataset, out=tmp_path, size=[64]),
        "--size [0]: give S or H W": dict(dataset=dataset, out=tmp_path / "t", size=[0]),
    }
    for want, args in cases.items():
        with pytest.raises(ConfigError) as err:
            task_from_lerobot(**{"world_model": wm, **args})
        assert want in str(err.value) and "\n" not in str(err.value), err.value
    assert not (tmp_path / "t").exists() and (tmp_path / "notes.txt").read_text() == "mine"


def test_a_failed_stage_leaves_no_task(dataset, tmp_path):
    out = tmp_path / "task"
    res = run(dataset, "--out", out, "--world-model", ROOT / "wmrl/assets/world_model",
              "--size", 64, "--reward-set", "no_such_key=1")  # the second stage fails
    assert res.returncode != 0 and "the reward stage failed" in res.stderr
    assert (tmp_path / ".task").exists() is False
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".task")]


@pytest.mark.slow
def test_one_command_makes_a_task_that_fit_runs_on(dataset, tmp_path):
    out = tmp_path / "task"
    res = run(dataset, "--out", out, "--world-model", ROOT / "wmrl/assets/world_model",
              "--size", 64, *TINY)
    assert res.returncode == 0, res.stderr[-3000:]
    states = json.loads((out / "initial_states" / "tasks.json").read_text())
    assert states["tasks"] == ["push the square"] * 3  # each episode's first frame
    assert (out / "reward").is_dir() and (out / "dataset").is_dir()
    assert (out / "world_model" / "transformer" / "config.json").is_file()
    assert (Path(f"{out}.runs") / "world_model" / "checkpoints" / "last.ckpt").exists()
    cmd = shlex.split(res.stdout.strip().splitlines()[-1])  # as a shell reads it
    assert cmd[:2] == ["python", "scripts/fit.py"]
    fit = subprocess.run([sys.executable, *cmd[1:], "trainer.max_steps=1", "logger=csv",
                          "rollout.num_envs=8", f"hydra.run.dir={tmp_path / 'fit'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert "step 1 | return" in fit.stdout + fit.stderr
    config = (tmp_path / "fit" / "config.yaml").read_text()
    assert str(out / "world_model") in config and str(out / "reward") in config
