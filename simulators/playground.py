"""MuJoCo Playground's DM Control suite and upstream's joystick tasks on MJX (``env.env_type=mujoco_playground``),
stepped by the agents' device steppers.

The envs are ``simulators.playground_env.PlaygroundVecEnv`` (JAX, built by its ``make_env``). The tasks take their
actions in [-1, 1] themselves (Playground's convention: ``env.rescale_action`` is false unless set). The G1 / T1
joystick tasks load their robots from a MuJoCo Menagerie checkout (``env.menagerie_path`` or
``$MUJOCO_MENAGERIE_PATH``), checked with the config.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from simulators.base import DEVICE, Problem, missing_modules

__all__ = ["DM_TASKS", "LOCOMOTION_TASKS", "MENAGERIE_ENV", "NAME", "TASKS", "check", "menagerie_problem",
           "missing"]

NAME = "mujoco_playground"
DM_TASKS: tuple[str, ...] = (
    "AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance", "CartpoleBalanceSparse",
    "CartpoleSwingup", "CartpoleSwingupSparse", "CheetahRun", "FingerSpin", "FingerTurnEasy", "FingerTurnHard",
    "FishSwim", "HopperHop", "HopperStand", "HumanoidRun", "HumanoidStand", "HumanoidWalk", "PendulumSwingup",
    "PointMass", "ReacherEasy", "ReacherHard", "SwimmerSwimmer6", "WalkerRun", "WalkerStand", "WalkerWalk",
)
"""MuJoCo Playground's DM Control suite tasks, assets in the wheel."""
LOCOMOTION_TASKS: dict[str, str] = {
    "G1JoystickFlatTerrain": "unitree_g1",
    "G1JoystickRoughTerrain": "unitree_g1",
    "T1JoystickFlatTerrain": "booster_t1",
    "T1JoystickRoughTerrain": "booster_t1",
}
"""Upstream's published MuJoCo Playground tasks, with the MuJoCo Menagerie folder of each one's robot."""
TASKS: tuple[str, ...] = DM_TASKS + tuple(LOCOMOTION_TASKS)
SUMMARY = "Playground's DM Control suite on MJX; G1 / T1 joystick need `env.menagerie_path`"
EXTRA = "mjx,playground"
NEEDS = "MuJoCo Playground needs the playground extra"
INSTALL = '-e ".[mjx,playground]"'
MODULES: tuple[str, ...] = ("jax", "mujoco_playground", "mujoco_mjx")
STEPPER = DEVICE
FRAMEWORKS: tuple[str, ...] = ("jax", "torch")
ONLY_FRAMEWORKS = None
RESCALE_ACTION = False
RECORDS_VIDEO = None
OWN_KEYS: dict[str, str] = {}
ARRAYS = "jax"
"""The framework of the envs' arrays: the torch agent steps them through ``simulators.torch_view.TorchEnv``."""
ENV_MODULE = "simulators.playground_env"
"""The module whose ``make_env(cfg, num_envs, seed, device)`` builds the envs (``simulators.make_device_env``)."""

MENAGERIE_ENV = "MUJOCO_MENAGERIE_PATH"
"""Environment variable with a MuJoCo Menagerie checkout, used when ``env.menagerie_path`` is null."""


def missing() -> list[str]:
    """The modules of ``MODULES`` that are not installed."""
    return missing_modules(MODULES)


def menagerie_problem(task: str, path: str | None) -> str | None:
    """None when ``task`` needs no MuJoCo Menagerie checkout or ``path`` holds its robot; else one line saying what
    is missing and where to get it."""
    robot = LOCOMOTION_TASKS.get(task)
    if robot is None:
        return None
    get = ("git clone https://github.com/google-deepmind/mujoco_menagerie and set env.menagerie_path=<dir> "
           f"(or {MENAGERIE_ENV}=<dir>)")
    if not path:
        return f"{task} loads its robot from a MuJoCo Menagerie checkout and none is set: {get}"
    if not os.path.isdir(os.path.join(path, robot)):
        return f"{task} needs {os.path.join(path, robot)} (MuJoCo Menagerie's {robot}), which does not exist: {get}"
    return None


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """Actions left to the task, and the Menagerie checkout of a locomotion task."""
    if cfg.env.rescale_action:
        yield ("env.rescale_action", cfg.env.rescale_action,
               "MuJoCo Playground tasks take actions in [-1, 1] themselves; set env.rescale_action=false")
    path = cfg.env.menagerie_path or os.environ.get(MENAGERIE_ENV) or None
    problem_line = menagerie_problem(cfg.env.env_name, path)
    if problem_line:
        yield ("env.menagerie_path", path, problem_line)
