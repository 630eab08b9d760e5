"""Every Lightning entry point starts, checks and stops the same way (wmrl/launch/trainer.py):
its config refused in one line before any data or model loads, each Lightning line printed
once, and SIGTERM -> ``last.ckpt`` + the resume command + exit 143 (the fit's own SIGTERM test
is tests/callbacks/test_checkpoints.py)."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from callbacks.preemption import PREEMPTED_EXIT_CODE
from tests.tiny_models import pushed_square, tiny_world_model
from wmrl.config import compose_config
from wmrl.errors import ConfigError
from wmrl.finetune.reward_trainer import train_reward
from wmrl.finetune.world_model_fit import finetune_world_model
from wmrl.lerobot.writer import write_lerobot
from wmrl.schema import WorldModelClipsSchema, WorldModelFinetuneSchema, fields_of

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "/nonexistent/wmrl"  # no data or model is ever read from here: the check comes first


def finetune_cfg(*overrides: str):
    return compose_config("finetune_world_model", [
        f"world_model.path={NOWHERE}/wm", f"data.paths=[{NOWHERE}/ds]", f"out_dir={NOWHERE}/o",
        f"run_dir={NOWHERE}/run", *overrides])


def reward_cfg(*overrides: str):
    return compose_config("train_reward", [f"data_dir={NOWHERE}/data", f"out_dir={NOWHERE}/o",
                                           f"run_dir={NOWHERE}/run", *overrides])


@pytest.mark.parametrize("override, error", [
    ("module.lr_schedule=linear",
     "module.lr_schedule: Invalid value 'linear', expected one of [constant, cosine]"),
    ("+module.lr_shedule=cosine", "module.lr_shedule: Key 'lr_shedule' not in"),
    ("data.batch_size=0", "data.batch_size=0 is not allowed: must be > 0"),
    ("checkpoint.keep_last=-2", "checkpoint.keep_last=-2 is not allowed"),
    ("module.part=vae", "module.part='vae' is not allowed: the fine-tune trains the DiT"),
    ("module.grad_clip=0", "module.grad_clip=0.0 is not allowed: must be > 0"),
    ("module.horizon_episodes=-1", "module.horizon_episodes=-1 is not allowed: must be >= 0"),
    ("module.own_context_fraction=1.0",
     "module.own_context_fraction=1.0 is not allowed: must be in [0, 1)"),
    ("module.own_context_refresh=0", "module.own_context_refresh=0 is not allowed: must be > 0"),
])
def test_finetune_world_model_refuses_a_bad_setting_before_any_data_or_model(override, error):
    with pytest.raises(ConfigError) as err:
        finetune_world_model(finetune_cfg(override))
    assert error in str(err.value) and "\n" not in str(err.value)


def test_finetune_world_model_refuses_a_folder_that_is_no_world_model(tmp_path):
    """An existing folder without the world model's config files is refused before any data
    loads (the same test as the plan's and the asset checks': is_world_model_dir)."""
    (tmp_path / "wm").mkdir()
    with pytest.raises(ConfigError) as err:
        finetune_world_model(finetune_cfg(f"world_model.path={tmp_path / 'wm'}",
                                          f"out_dir={tmp_path / 'out'}"))
    assert "is not a world-model directory" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("override, error", [
    ("arch=resnet18", "arch: Invalid value 'resnet18', expected one of [resnet, resnet_task]"),
    ("data_format=hdf5", "data_format: Invalid value 'hdf5'"),
    ("model.dropout=1.0", "model.dropout=1.0 is not allowed: must be in [0, 1)"),
    ("gradient_clip_norm=0", "gradient_clip_norm=0.0 is not allowed: must be > 0"),
    ("+lr_schedule=cosine", "lr_schedule: Key 'lr_schedule' not in 'TrainRewardConfig'"),
    ("task.name=stack_ten", "task.name='stack_ten' is not allowed"),
])
def test_train_reward_refuses_a_bad_setting_before_any_data_or_model(override, error):
    with pytest.raises(ConfigError) as err:
        train_reward(reward_cfg(override))
    assert error in str(err.value) and "\n" not in str(err.value)


def test_the_schemas_name_the_constructors_settings():
    """``module`` and ``data`` of conf/finetune_world_model.yaml go to WorldModelFinetune and
    WorldModelClipData as keyword arguments: their schemas know exactly those."""
    from wmrl.finetune.world_model_clips import WorldModelClipData
    from wmrl.finetune.world_model_module import WorldModelFinetune

    def settings(cls, *given):
        return set(inspect.signature(cls).parameters) - set(given)

    assert fields_of(WorldModelFinetuneSchema) == settings(
        WorldModelFinetune, "world_model", "objective", "lora", "video_dir", "horizon_report",
        "seed")
    assert fields_of(WorldModelClipsSchema) == settings(WorldModelClipData, "seed")


@pytest.mark.slow
def test_world_model_finetune_sigterm_saves_last_and_exits_143(tmp_path):
    """scripts/finetune_world_model.py as a user runs it, SIGTERM once its first
    checkpoint is on disk (every step's): the step in progress finishes, last.ckpt holds it, the resume
    command is printed, the exit code is 143; Lightning's INFO lines print once (Hydra's
    root handler only)."""
    tiny_world_model().save_pretrained(tmp_path / "wm")
    write_lerobot(tmp_path / "ds", (pushed_square(i, T) for i, T in enumerate((17, 9, 12))),
                  fps=10)
    run = tmp_path / "run"
    args = [sys.executable, "scripts/finetune_world_model.py",
            f"world_model.path={tmp_path / 'wm'}", f"data.paths=[{tmp_path / 'ds'}]", f"out_dir={tmp_path / 'out'}",
            "trainer.max_steps=10000", "checkpoint.every_n_steps=1", "checkpoint.keep_last=1",
            "validate_first=false", "trainer.val_check_interval=10000", "+lora.rank=2",
            "module.num_inference_steps=1", f"hydra.run.dir={run}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoints" / "last.ckpt").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "no step checkpoint"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    log = out + err
    assert proc.returncode == PREEMPTED_EXIT_CODE, log[-3000:]
    last = run / "checkpoints" / "last.ckpt"
    step = torch.load(last, weights_only=True)["global_step"]
    assert 1 <= step < 10000
    assert (f"preempted at step {step}: saved {last}; resume with: python "
            "scripts/finetune_world_model.py") in log, log[-3000:]
    assert f"ckpt_path={last} hydra.run.dir={run}" in log
    assert log.count("GPU available:") == 1, log[-3000:]
    assert not (tmp_path / "out").exists()  # preempted: nothing exported
