"""Checkpoints that survive faults, on the toy problem (real Lightning + Ray): the newest
``keep_last`` step files + ``last.ckpt``, each with the run's config; SIGTERM during a step ->
``last.ckpt`` of that step, the resume command and exit 143, and the resume continuing the
same metrics.csv; ``scripts/eval.py`` refusing a checkpoint of another policy config."""

import csv
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_fit_toy import toy_cfg

from callbacks.preemption import PREEMPTED_EXIT_CODE
from wmrl.build import to_container
from wmrl.config import ConfigError
from wmrl.eval.policy_checkpoint import load_policy
from wmrl.fit import fit
from wmrl.schema import with_defaults

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def four_steps(tmp_path_factory, ray_local):
    """A 4-step toy fit keeping 2 step checkpoints: (run dir, its resolved config: what the
    config says, and the schemas' defaults for what it leaves out)."""
    run_dir = tmp_path_factory.mktemp("four_steps")
    cfg = toy_cfg(run_dir, **{"trainer.max_steps": 4, "checkpoint.keep_last": 2})
    fit(cfg)
    return run_dir, to_container(with_defaults(cfg))


def test_keeps_the_last_k_step_checkpoints_each_with_the_config(four_steps):
    run_dir, config = four_steps
    ckpts = run_dir / "checkpoints"
    assert sorted(os.listdir(ckpts)) == ["last.ckpt", "step-000003.ckpt", "step-000004.ckpt"]
    for name, step in [("step-000003.ckpt", 3), ("step-000004.ckpt", 4), ("last.ckpt", 4)]:
        saved = load(ckpts / name)
        assert saved["global_step"] == step and saved["policy_version"] == step, name
        assert saved["wmrl_config"] == config, name
    assert yaml.safe_load((run_dir / "config.yaml").read_text()) == config


def _preempt_fit(run_dir: Path, ray_local, max_steps: int, every_n_steps: int):
    """Runs preempt_fit.py and sends SIGTERM once its 2nd step has begun."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               WMRL_TEST_RAY_ADDRESS=ray_local.get_runtime_context().gcs_address)
    args = [sys.executable, str(HERE / "preempt_fit.py"), str(run_dir), str(max_steps),
            str(every_n_steps)]
    proc = subprocess.Popen(args, env=env, cwd=run_dir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 150
        while not (run_dir / "step2_started").exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "the 2nd step never started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:  # it hung: leave no process behind
            proc.kill()
            proc.communicate()
    return proc.returncode, out + err


def _csv_steps(run_dir: Path) -> list[int]:
    with open(run_dir / "csv" / "version_0" / "metrics.csv", newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


@pytest.mark.slow
def test_sigterm_during_a_step_saves_it_and_the_resume_continues_the_run(tmp_path, ray_local):
    """Checkpoints every 3rd step: the preemption at step 2 writes last.ckpt though no periodic
    checkpoint is due; the resume finishes the run on the same metrics.csv. (That a resume goes
    on rotating the first run's step files is tests/test_resume.py's.)"""
    rc, log = _preempt_fit(tmp_path, ray_local, max_steps=4, every_n_steps=3)
    assert rc == PREEMPTED_EXIT_CODE, log[-4000:]
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert os.listdir(tmp_path / "checkpoints") == ["last.ckpt"]
    saved = load(last)  # the 2nd step was in progress at the signal: it finished, then saved
    assert saved["global_step"] == 2 and saved["policy_version"] == 2
    assert "wmrl_config" in saved
    assert (f"preempted at step 2: saved {last}; resume with: python scripts/fit.py "
            f"ckpt_path={last} hydra.run.dir={tmp_path}") in log, log[-4000:]
    assert _csv_steps(tmp_path) == [0, 1]

    # the resume, in this process (the printed command's config: preempt_fit.py's)
    fit(toy_cfg(tmp_path, ckpt_path=str(last), **{
        "trainer.max_steps": 4, "checkpoint.every_n_steps": 3, "checkpoint.keep_last": 2,
        "logger": {"_target_": "callbacks.resumable_loggers.AppendingCSVLogger", "version": 0}}))
    assert load(last)["global_step"] == 4
    assert _csv_steps(tmp_path) == [0, 1, 2, 3]  # the rows before the preemption kept
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["last.ckpt", "step-000003.ckpt"]


def test_eval_refuses_a_checkpoint_of_another_policy_config(four_steps, tmp_path):
    run_dir, config = four_steps
    last = run_dir / "checkpoints" / "last.ckpt"
    policy = load_policy(config["policy"], str(last))  # the fit's policy config: loads
    assert torch.equal(policy.bias, load(last)["state_dict"]["policy.bias"])
    # image_size=4 would otherwise fail on tensor shapes deep inside load_state_dict
    with pytest.raises(ConfigError, match=r"policy\.image_size: '<unset>' in the checkpoint, "
                                          r"4 given.*policy="):
        load_policy(dict(config["policy"], image_size=4), str(last))

    old = load(last)
    del old["wmrl_config"]  # written before checkpoints recorded their config
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.warns(UserWarning, match="old.ckpt records no run config"):
        load_policy(config["policy"], str(tmp_path / "old.ckpt"))

    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="notes.ckpt is not a Lightning checkpoint"):
        load_policy(config["policy"], str(tmp_path / "notes.ckpt"))


def test_eval_cli_refusal_is_one_line_and_exit_code_2(four_steps):
    """The shipped policy config against the toy checkpoint, refused before any model loads."""
    last = four_steps[0] / "checkpoints" / "last.ckpt"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/eval.py"), f"ckpt_path={last}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("config error:")]
    assert len(errors) == 1 and "policy._target_: 'toys.LinearBinPolicy' in the checkpoint" \
        in errors[0], proc.stderr[-2000:]


def test_resume_command_repeats_the_command_line_overrides():
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from callbacks.preemption import resume_command

    assert resume_command("/r/checkpoints/last.ckpt", "/r") == (  # outside Hydra: none
        "python scripts/fit.py ckpt_path=/r/checkpoints/last.ckpt hydra.run.dir=/r")
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("fit", return_hydra_config=True, overrides=[
            "trainer.max_steps=2", "logger=csv", "ckpt_path=/old.ckpt", "hydra.run.dir=/old"])
        HydraConfig.instance().set_config(cfg)
        try:
            command = resume_command("/my run/checkpoints/last.ckpt", "/my run")
        finally:
            HydraConfig.instance().cfg = None
    # shell words, each value as Hydra reads it (quoted: it has a space)
    assert shlex.split(command) == ["python", "scripts/fit.py", "trainer.max_steps=2",
                                    "logger=csv", "ckpt_path='/my run/checkpoints/last.ckpt'",
                                    "hydra.run.dir='/my run'"]


def test_csv_logger_appends_to_the_metrics_of_the_run_dir(tmp_path):
    from callbacks.resumable_loggers import AppendingCSVLogger

    first = AppendingCSVLogger(tmp_path, name="csv", version=0)
    first.log_metrics({"a": 1.0}, step=0)
    first.finalize("failed")
    resumed = AppendingCSVLogger(tmp_path, name="csv", version=0)
    resumed.log_metrics({"a": 2.0, "b": 3.0}, step=1)  # a new key: the header grows
    resumed.finalize("success")
    with open(tmp_path / "csv" / "version_0" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"a": "1.0", "b": "", "step": "0"}, {"a": "2.0", "b": "3.0", "step": "1"}]


def test_wandb_logger_gets_one_id_per_run_dir(tmp_path):
    from omegaconf import OmegaConf

    from wmrl.launch.trainer import build_logger

    def logger_id(run_dir):
        cfg = OmegaConf.create({"run_dir": str(run_dir)})
        cfg.logger = OmegaConf.load(ROOT / "conf" / "logger" / "wandb.yaml")
        return build_logger(cfg).version

    first = logger_id(tmp_path / "a")
    assert first == logger_id(tmp_path / "a") == (tmp_path / "a" / "wandb_id").read_text().strip()
    assert logger_id(tmp_path / "b") != first
