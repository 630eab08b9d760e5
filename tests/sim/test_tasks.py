"""The tabletop's task table without a simulator: config checking, the world-model and reward
trainers and the LeRobot path import no MuJoCo; the table is the one ``tabletop.py`` runs on."""

import pathlib
import subprocess
import sys

from wmrl.sim import tabletop, tasks

ROOT = pathlib.Path(__file__).resolve().parents[2]

# what a user with only the WoVR release or a LeRobot dataset runs: config and schema checks,
# the one trainer set-up and the fit's assembly (a sim-eval callback loads MuJoCo when it
# runs), the world-model trainer (its clips, module and step), the reward trainer's modules,
# the LeRobot reader and export
NO_SIMULATOR = ("wmrl.config", "wmrl.schema", "wmrl.fit", "wmrl.launch.trainer",
                "wmrl.eval.wm_fidelity",
                "wmrl.finetune.world_model", "wmrl.finetune.world_model_module",
                "wmrl.finetune.world_model_clips", "wmrl.finetune.world_model_fit",
                "wmrl.finetune.world_model_build", "wmrl.finetune.update",
                "wmrl.finetune.reward_trainer", "wmrl.finetune.reward_datasets",
                "wmrl.finetune.reward_data", "wmrl.finetune.reward_on_imagination",
                "wmrl.rewards.resnet", "wmrl.lerobot.dataset", "wmrl.pipeline.lerobot_export",
                "wmrl.pipeline.lerobot_reset", "wmrl.pipeline.task_from_lerobot")


def test_training_and_config_checks_load_no_mujoco():
    code = (f"import importlib, sys\nfor m in {NO_SIMULATOR!r}: importlib.import_module(m)\n"
            "print([m for m in sys.modules if m.split('.')[0] == 'mujoco'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out == "[]"


def test_a_scene_loads_mujoco_when_built():
    code = ("import sys\nfrom wmrl.sim.tabletop import TabletopEnv\n"
            "print('mujoco' in sys.modules)\n"
            "TabletopEnv(task='red_of_two', render=False).reset()\n"
            "print('mujoco' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["False", "True"]


def test_the_table_is_the_simulators():
    assert tabletop.TASKS is tasks.TASKS and tabletop.task_by_name is tasks.task_by_name
    assert tabletop.camera_names() == tasks.CAMERAS == ("front", "front_close")
    obs, _ = tabletop.TabletopEnv(task="red_left", render=False).reset()
    assert obs["state"].shape == (tasks.STATE_DIM,)
    assert max(s.stop for s in tasks.STATE_SLICES.values()) == tasks.STATE_DIM
    assert tasks.task_by_name("push the red block to the left").name == "red_left"
    assert tasks.task_by_name(3).name == "red_of_two"
