"""No command deletes what it did not write: every script that writes a folder refuses, in one
line and before any work, an output folder holding a user's file (``notes.txt``), and
``overwrite=true`` / ``--force`` lets it through (``wmrl.io.atomic.check_output_dir``); tested
through the function each script calls. The importers and exports are tested beside their own
tests (tests/pipeline/, test_task_from_lerobot).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import wmrl.build  # noqa: F401  (the ${wmrl_assets:} resolver the configs use)
from wmrl.errors import ConfigError
from wmrl.finetune.reward_on_imagination import fit_and_save
from wmrl.finetune.reward_trainer import train_reward
from wmrl.finetune.world_model_build import build_world_model
from wmrl.finetune.world_model_fit import finetune_world_model
from wmrl.io.atomic import check_output_dir, written_by
from wmrl.pipeline.assets import OUTPUTS, check_outputs, make_assets
from wmrl.pipeline.sft_policy import train_sft_policy
from wmrl.rewards.resnet import build_classifier, save_checkpoint
from wmrl.sim import collect

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def users(tmp_path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    return folder


def hydra_config(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(name, overrides=list(overrides))


def refused(call, folder: Path, writer: str, key: str = "out_dir",
            flag: str = "overwrite=true") -> None:
    with pytest.raises(ConfigError) as err:
        call()
    assert str(err.value) == (f"{key}={folder} holds files wmrl's {writer} did not write "
                              f"(notes.txt): pick a new or empty folder, or pass {flag} to "
                              "replace it (everything in it is deleted)")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_trainers_refuse_a_users_out_dir_before_reading_anything(users, tmp_path):
    missing = tmp_path / "no_data"  # read right after the check: a later check would fail here
    cfg = hydra_config("train_world_model", f"train_dirs=[{missing}]", f"out_dir={users}")
    refused(lambda: build_world_model(OmegaConf.to_container(cfg, resolve=True)), users,
            "world_model")
    cfg = hydra_config("train_world_model", f"train_dirs=[{missing}]",
                       f"out_dir={tmp_path / 'new'}", f"initial_states.out_dir={users}")
    refused(lambda: build_world_model(OmegaConf.to_container(cfg, resolve=True)), users,
            "initial_states", key="initial_states.out_dir")
    cfg = hydra_config("finetune_world_model", f"out_dir={users}", f"run_dir={tmp_path}",
                       f"world_model.path={missing}", f"data.paths=[{missing}]")
    refused(lambda: finetune_world_model(cfg), users, "world_model")
    cfg = hydra_config("train_reward", f"data_dir={missing}", f"out_dir={users}",
                       f"run_dir={tmp_path}")
    refused(lambda: train_reward(cfg), users, "reward")
    cfg = hydra_config("fit_reward_to_imagination", f"data_dir={missing}", f"out_dir={users}")
    refused(lambda: fit_and_save(OmegaConf.to_container(cfg, resolve=True)),
            users, "reward")
    cfg = OmegaConf.to_container(hydra_config("sft_policy", f"data_dir={missing}",
                                              f"out_dir={users}"), resolve=True)
    refused(lambda: train_sft_policy(cfg), users, "policy")
    with pytest.raises(FileNotFoundError):  # overwrite=true: past the check, to the data
        train_sft_policy({**cfg, "overwrite": True})
    cfg = collect.load_config(str(ROOT / "conf/sim/tabletop.yaml"), [f"collect.out_dir={users}"])
    refused(lambda: collect.collect(cfg), users, "collect", key="collect.out_dir",
            flag="collect.overwrite=true")


def test_a_collection_and_a_reward_are_marked_as_their_writers(tmp_path):
    cfg = collect.load_config(str(ROOT / "conf/sim/tabletop.yaml"), [
        f"collect.out_dir={tmp_path / 'ds'}", "collect.episodes_per_task=1",
        "collect.num_envs=1", "env.image_size=[16,16]", "collect.tasks=[red_on_plate]"])
    assert collect.collect(cfg)["episodes"] == 1
    assert written_by(tmp_path / "ds") == "collect"
    check_output_dir(tmp_path / "ds", "collect")  # its own: passes the check
    torch.manual_seed(0)
    config = {"widths": [4, 4, 4, 4], "blocks_per_stage": 1}
    save_checkpoint(build_classifier("resnet", config), config, tmp_path / "reward")
    assert written_by(tmp_path / "reward") == "reward"
    with pytest.raises(ConfigError, match="is reward's output, not world_model's"):
        check_output_dir(tmp_path / "reward", "world_model")


def test_make_assets_can_rewrite_the_checked_in_assets_and_refuses_a_users_folder(tmp_path):
    check_outputs(ROOT / "wmrl" / "assets", OUTPUTS, force=False)
    assets, data = tmp_path / "assets", tmp_path / "data"
    (assets / "reward").mkdir(parents=True)
    (assets / "reward" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as err:
        make_assets(data, assets)
    assert not data.exists()  # no stage ran
    assert f"--assets={assets / 'reward'} holds files" in str(err.value)
    assert "pass --force" in str(err.value) and "\n" not in str(err.value)
