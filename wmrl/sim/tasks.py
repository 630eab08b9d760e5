"""The tabletop suite's facts that need no simulator: its tasks (name, instruction, kind, block,
initial-state layout), its cameras and its ``obs["state"]`` layout. The schema, the
world-model and reward trainers and the LeRobot export read them from here, so they never load
MuJoCo; ``tabletop.py`` builds its scene and success predicates on the same table."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Task:
    name: str
    instruction: str
    kind: str  # "place" | "push"
    block: str  # "red" | "blue"
    layout: str = "random"  # initial-state distribution: "random" | "slots" (tabletop.py)


TASKS: tuple[Task, ...] = (
    Task("red_on_plate", "put the red block on the green plate", "place", "red"),
    Task("blue_on_plate", "put the blue block on the green plate", "place", "blue"),
    Task("red_left", "push the red block to the left", "push", "red"),
    Task("red_of_two", "pick up the red block and put it on the plate", "place", "red", "slots"),
)
TASK_NAMES = tuple(t.name for t in TASKS)
BLOCKS = ("red", "blue")

# the scene's cameras, as tabletop.py's MJCF defines them (a test holds the two equal)
CAMERAS = ("front", "front_close")

# obs["state"] layout (float32 [STATE_DIM]); the scripted expert reads only this.
STATE_SLICES = {
    "hand_pos": slice(0, 3),
    "hand_rpy": slice(3, 6),  # commanded roll, pitch, yaw
    "gripper": slice(6, 7),  # finger aperture: 1 open .. 0 closed
    "held": slice(7, 8),  # -1 nothing, 0 red, 1 blue
    "red_pos": slice(8, 11),
    "blue_pos": slice(11, 14),
    "plate_pos": slice(14, 17),
    "red_quat": slice(17, 21),
    "blue_quat": slice(21, 25),
}
STATE_DIM = 25


def task_by_name(task: str | int) -> Task:
    """A task from its name, its instruction, or its index in ``TASKS``."""
    if isinstance(task, (int, np.integer)):
        if not 0 <= int(task) < len(TASKS):
            raise ValueError(f"task index {task} out of range [0, {len(TASKS)})")
        return TASKS[int(task)]
    for t in TASKS:
        if task in (t.name, t.instruction):
            return t
    raise ValueError(f"unknown task {task!r}; expected one of {list(TASK_NAMES)}")
