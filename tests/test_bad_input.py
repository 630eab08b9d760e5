"""Every bad setting is refused before Ray or any model starts, in one line that names the key,
the value and what is allowed (``wmrl.schema`` + ``wmrl.config``), and ``scripts/fit.py`` turns
it into exit code 2 without a traceback."""

import os
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT
from omegaconf import OmegaConf
from test_asset_checks import copy, edit_json, truncate
from test_config import fit_cfg

from wmrl.config import ConfigError, check_paths, resolve_ckpt_path, validate
from wmrl.fit import build_datamodule

# (overrides, what the one-line message must say)
BAD = [
    (["algorithm.aggregation=mean"],
     r"algorithm.aggregation='mean' is not allowed: one of \['traj-mean', 'token-mean', "
     r"'seq-mean-token-sum'\]"),
    (["algorithm.advantage_scale=std"], r"algorithm.advantage_scale='std'.*\['group', 'none'\]"),
    (["algorithm.adv_estimator=ppo"], r"algorithm.adv_estimator='ppo'.*\['grpo', 'rloo'\]"),
    (["rollout.temperature=0"], r"rollout.temperature=0.0 is not allowed: must be > 0"),
    (["rollout.num_envs=8.5"], r"rollout.num_envs: Value '8.5' .* could not be converted to Int"),
    (["rollout.num_envs=-8"], r"rollout.num_envs=-8 is not allowed: must be > 0"),
    (["algorithm.lr=-1e-4"], r"algorithm.lr=-0.0001 is not allowed: must be > 0"),
    (["rollout.group_size=1", "rollout.num_envs=8"],
     r"rollout.group_size=1 is not allowed: GRPO needs a group of >= 2"),
    (["rollout.placement=spread"], r"rollout.placement: .*'spread'.*collocated, disaggregated"),
    (["rollout.weight_sync.transport=nccl"], r"rollout.weight_sync.transport: .*'nccl'.*device"),
    (["rollout.device=tpu"], r"rollout.device: .*'tpu'.*auto, cpu, cuda, npu, musa, xpu"),
    (["rollout.num_envs=60"], r"rollout.num_envs=60 is not divisible by rollout.group_size=8"),
    (["algorithm.global_batch=500"], r"algorithm.global_batch=500 is not divisible by "
                                     r"algorithm.micro_batch=32"),
    (["rollout.max_episode_steps=60"], r"rollout.max_episode_steps=60 must be a multiple of "
                                       r"rollout.chunk=8"),
    (["rollout.placement=hybrid"], r"set rollout.pipeline_stages >= 2"),
    (["trainer.max_steps=0"], r"trainer.max_steps=0 is not allowed: an integer >= 1"),
    (["algorithm.betas=[0.9,1.5]"], r"algorithm.betas\[1\]=1.5 is not allowed: must be in \[0, 1\)"),
    (["checkpoint.keep_last=-2"], r"checkpoint.keep_last=-2 is not allowed: the number of step"),
    (["rollout.max_actor_restarts=-1"], r"rollout.max_actor_restarts=-1 is not allowed"),
    (["env.success_threshold=1.5"], r"env.success_threshold=1.5 is not allowed: must be in "
                                     r"\[0, 1\]"),
    (["env.num_inference_steps=0"], r"env.num_inference_steps=0 is not allowed: must be > 0"),
    (["env.resample_return=max"], r"env.resample_return: .*'max'.*\[min, mean\]"),
    (["algorithm.drop_unrepeatable=true", "env.resample_check=false"],
     r"algorithm.drop_unrepeatable=true .* set env.resample_check=true"),
    (["+env.num_envs=8"], r"env.num_envs=8 conflicts with the rollout's 64 per env worker"),
    (["policy.pretrained_path=/nope/policy"],
     r"policy.pretrained_path=/nope/policy does not exist: point it at a save_pretrained"),
    (["env.world_model.path=/nope/wm"], r"env.world_model.path=/nope/wm does not exist"),
    (["env.initial_states=/nope/states"], r"env.initial_states=/nope/states does not exist"),
    (["reward.checkpoint=/nope/rm.pth"], r"reward.checkpoint=/nope/rm.pth does not exist"),
    (["ckpt_path=/nope.ckpt"], r"ckpt_path=/nope.ckpt does not exist or is not a file"),
]


def refuse(cfg) -> str:
    """What fit does before Ray or any model starts (validate, paths, the DataModule's own
    checks); returns the error line."""
    with pytest.raises(ConfigError) as err:
        validate(cfg)
        check_paths(cfg)
        build_datamodule(cfg)
    return str(err.value)


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_setting_is_refused_in_one_line(overrides, message):
    import re

    line = refuse(fit_cfg(*overrides))
    assert re.search(message, line), line
    assert "\n" not in line


def test_good_defaults_pass():
    for over in ([], ["experiment=smoke"], ["experiment=sim_oracle"]):
        cfg = fit_cfg(*over)
        validate(cfg)
        check_paths(cfg)


def test_a_file_that_is_not_a_checkpoint_is_named(tmp_path):
    junk = tmp_path / "last.ckpt"
    junk.write_text("not a checkpoint")
    line = refuse(fit_cfg(f"ckpt_path={junk}"))
    assert f"ckpt_path={junk} is not a Lightning checkpoint" in line
    plain = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, plain)  # a torch file, but no Lightning state
    assert "no state_dict / global_step" in refuse(fit_cfg(f"ckpt_path={plain}"))


def test_ckpt_path_last_is_the_run_dirs_last_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match=rf"ckpt_path=last: {tmp_path}/checkpoints/last.ckpt "
                                          r"does not exist: pass hydra.run.dir=<the run's dir>"):
        resolve_ckpt_path(fit_cfg(f"run_dir={tmp_path}", "ckpt_path=last"))
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_text("not a checkpoint")
    cfg = resolve_ckpt_path(fit_cfg(f"run_dir={tmp_path}", "ckpt_path=last"))
    assert cfg.ckpt_path == str(tmp_path / "checkpoints" / "last.ckpt")
    # then checked as any ckpt_path
    assert f"ckpt_path={cfg.ckpt_path} is not a Lightning checkpoint" in refuse(cfg)


def test_a_folder_that_is_not_a_checkpoint_is_named(tmp_path):
    (tmp_path / "ckpt").mkdir()
    line = refuse(fit_cfg(f"ckpt_path={tmp_path / 'ckpt'}"))
    assert line == (f"ckpt_path={tmp_path / 'ckpt'} is a directory but not a sharded checkpoint "
                    "(no .metadata and meta.pt): pass a .ckpt file or a checkpoint folder that "
                    "scripts/fit.py wrote")


def test_a_checkpoint_of_another_policy_config_is_named(tmp_path):
    cfg = fit_cfg()
    ckpt = tmp_path / "other.ckpt"
    policy = dict(OmegaConf.to_container(cfg.policy, resolve=True), unnorm_key="libero")
    torch.save({"state_dict": {}, "global_step": 3, "wmrl_config": {"policy": policy}}, ckpt)
    line = refuse(fit_cfg(f"ckpt_path={ckpt}"))
    assert "was trained with another policy config" in line
    assert line.endswith("(policy.unnorm_key: 'libero' in the checkpoint, 'tabletop' given): "
                         "pass the policy=... overrides of the run that wrote it")
    assert cfg.policy.unnorm_key == "tabletop"


# damaged copies of the shipped assets (wmrl.asset_checks): name -> (make(tmp_path) ->
# (overrides, the line's start)); refused before Ray or any model starts, headers only
def _policy(tmp_path, damage):
    pol = copy(tmp_path, "policy")
    weights = pol / "model-00001-of-00001.safetensors"
    if damage == "truncated":
        truncate(weights)
    elif damage == "garbage":
        weights.write_bytes(b"<html>404 Not Found</html>" * 100)
    else:
        edit_json(pol / "config.json", text_config__hidden_size=96)
        return [f"policy.pretrained_path={pol}"], (
            f"policy.pretrained_path: {pol}/config.json: does not match the weights in ")
    return [f"policy.pretrained_path={pol}"], (
        f"policy.pretrained_path: {weights}: not a whole safetensors file")


def _world_model(tmp_path, sub):
    wm = copy(tmp_path, "world_model")
    truncate(wm / sub)
    return [f"env.world_model.path={wm}"], (
        f"env.world_model.path: {wm / sub}: not a whole safetensors file")


def _empty_states(tmp_path):
    (tmp_path / "states").mkdir()
    return [f"env.initial_states={tmp_path / 'states'}"], (
        f"env.initial_states: {tmp_path / 'states'}: an empty directory, expected "
        "initial_states.safetensors and tasks.json")


def _reward(tmp_path, kind):
    if kind == "pth":
        torch.save([torch.zeros(3)], tmp_path / "rm.pth")
        return [f"reward.checkpoint={tmp_path / 'rm.pth'}"], (
            f"reward.checkpoint: {tmp_path / 'rm.pth'}: holds a list, not a state dict")
    rew = copy(tmp_path, "reward")
    truncate(rew / "model.safetensors", 0.9)
    return [f"reward.checkpoint={rew}"], (
        f"reward.checkpoint: {rew}/model.safetensors: not a whole safetensors file")


DAMAGED = {
    "policy weights truncated": lambda t: _policy(t, "truncated"),
    "policy weights not safetensors": lambda t: _policy(t, "garbage"),
    "policy config.json hidden_size": lambda t: _policy(t, "config"),
    "world-model transformer truncated":
        lambda t: _world_model(t, "transformer/diffusion_pytorch_model.safetensors"),
    "world-model vae truncated":
        lambda t: _world_model(t, "vae/diffusion_pytorch_model.safetensors"),
    "world-model action truncated":
        lambda t: _world_model(t, "action/action_modules.safetensors"),
    "initial states empty": _empty_states,
    "reward safetensors truncated": lambda t: _reward(t, "safetensors"),
    "reward pth not a state dict": lambda t: _reward(t, "pth"),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_asset_is_refused_in_one_line(tmp_path, name):
    overrides, start = DAMAGED[name](tmp_path)
    line = refuse(fit_cfg(*overrides))
    assert line.startswith(start), line


FIT_SCRIPT = os.path.join(ROOT, "scripts", "fit.py")


def run_fit(*overrides: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    env.pop("WMRL_FULL_ERROR", None)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, FIT_SCRIPT, "logger=csv", *overrides],
                          capture_output=True, text=True, env=env, timeout=300)
    return proc, time.monotonic() - start


def one_config_error(proc: subprocess.CompletedProcess) -> str:
    """Exit 2, no traceback, no Ray: the last stderr line is the one config error."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "ray" not in (proc.stdout + proc.stderr).lower()
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("config error: ") and lines[-1].endswith(
        " (WMRL_FULL_ERROR=1 shows the trace)"), lines
    return lines[-1].removeprefix("config error: ")


@pytest.mark.slow
def test_fit_script_exits_2_with_one_line_at_startup(tmp_path):
    """The script as a program: a fresh Python, its imports, Hydra, the header reads of a
    damaged asset, then exit 2 and the one line before Ray or any model starts - where the
    loads used to fail 20-95 s in, from inside a Ray actor, through Hydra's instantiate
    wrapper. One case end to end (each starts a Python); the other cases run the same script
    in this process below, and every case of DAMAGED is refused in process above."""
    overrides, start = DAMAGED["world-model transformer truncated"](tmp_path)
    proc, seconds = run_fit(f"hydra.run.dir={tmp_path / 'run'}", *overrides)
    assert one_config_error(proc).startswith(start)
    assert seconds < 60, seconds


def run_fit_in_process(monkeypatch, capfd, tmp_path, *overrides: str):
    """``python scripts/fit.py logger=csv <overrides>`` in this process: the script's own
    ``__main__`` (``hydra.main``, its ``except ConfigError``, ``sys.exit``), Hydra's outputs
    in ``tmp_path``. What comes after the checks (the policy, the trainer that starts Ray, a
    Ray of its own) fails the test if reached, so a refusal shows it came first. Returns
    (exit code, stdout, stderr)."""
    import runpy

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    import wmrl.fit

    def started(*args, **kwargs):
        raise AssertionError("got past the checks: a model, the trainer or Ray started")

    for name in ("build_module", "build_trainer"):
        monkeypatch.setattr(wmrl.fit, name, started)
    monkeypatch.setattr("ray.init", started)
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    monkeypatch.delenv("WMRL_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the repo root first
    monkeypatch.setattr(sys, "argv", [
        FIT_SCRIPT, "logger=csv", *overrides, f"hydra.run.dir={tmp_path / 'run'}",
        "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"])
    capfd.readouterr()
    try:
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(FIT_SCRIPT, run_name="__main__")
    finally:  # Hydra's globals, as a fresh process would leave the next test
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    out = capfd.readouterr()
    return exit_.value.code, out.out, out.err


# the same contract in this process: a plain config error, a damaged asset, no accelerator
IN_PROCESS = {
    "group_size=1": lambda t: (["rollout.group_size=1", "rollout.num_envs=8"],
                               "rollout.group_size=1 is not allowed: GRPO needs a group of >= 2"),
    "policy config.json hidden_size": DAMAGED["policy config.json hidden_size"],
    "absent accelerator": lambda t: (["trainer.accelerator=cuda"], (
        "trainer.accelerator=cuda: this machine has no cuda device (Lightning: "
        "CUDAAccelerator not available)")),
}
CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")


@pytest.mark.parametrize("name", [pytest.param(n, marks=[CUDA] if "accelerator" in n else [])
                                  for n in sorted(IN_PROCESS)])
def test_fit_script_exits_2_with_one_line(tmp_path, monkeypatch, capfd, name):
    overrides, start = IN_PROCESS[name](tmp_path)
    code, out, err = run_fit_in_process(monkeypatch, capfd, tmp_path, *overrides)
    assert one_config_error(subprocess.CompletedProcess([], code, out, err)).startswith(start)
