"""mjlab's tasks on MuJoCo Warp (``env.env_type=mjlab``), stepped by the torch agent's device stepper.

The envs are ``simulators.mjlab_env.MjlabVecEnv`` (torch tensors, no copy between frameworks), built by
its ``make_env`` on ``env.device`` (null: the agent's device). The tasks take their actions in [-1, 1] and scale them
themselves (``env.rescale_action`` is false unless set). Upstream's tasks only: mjlab's others observe camera images
or need motion files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from simulators.base import DEVICE, Problem, missing_modules

__all__ = ["NAME", "TASKS", "check", "missing"]

NAME = "mjlab"
TASKS: tuple[str, ...] = (
    "Mjlab-Velocity-Flat-Unitree-G1", "Mjlab-Velocity-Rough-Unitree-G1", "Mjlab-Velocity-Flat-Unitree-Go1",
    "Mjlab-Velocity-Rough-Unitree-Go1", "Mjlab-Lift-Cube-Yam", "Mjlab-Cartpole-Balance", "Mjlab-Cartpole-Swingup",
)
"""Upstream's mjlab tasks (scripts/run_mjlab.sh), assets in mjlab's wheel (tests/test_mjlab_envs.py checks the
list against the installed mjlab)."""
SUMMARY = ("mjlab's `Mjlab-Velocity-{Flat,Rough}-Unitree-{G1,Go1}`, `Mjlab-Lift-Cube-Yam`, `Mjlab-Cartpole-*` "
           "(torch agent)")
EXTRA = "mjlab"
NEEDS = "mjlab's tasks need the mjlab extra"
INSTALL = '-c constraints/ci.txt -e ".[mjlab]"'
MODULES: tuple[str, ...] = ("mjlab",)
STEPPER = DEVICE
FRAMEWORKS: tuple[str, ...] = ("torch",)
ONLY_FRAMEWORKS = "mjlab steps MuJoCo Warp from torch"
RESCALE_ACTION = False
RECORDS_VIDEO = "its evaluation videos are not recorded (MuJoCo Warp's state is not rendered here)"
OWN_KEYS: dict[str, str] = {"env.device": "is the mjlab simulator's device"}
ARRAYS = "torch"
"""The framework of the envs' arrays."""
ENV_MODULE = "simulators.mjlab_env"
"""The module whose ``make_env(cfg, num_envs, seed, device)`` builds the envs (``simulators.make_device_env``)."""


def missing() -> list[str]:
    """The modules of ``MODULES`` that are not installed."""
    return missing_modules(MODULES)


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """Actions left to the task, and the simulator's device."""
    if cfg.env.rescale_action:
        yield ("env.rescale_action", cfg.env.rescale_action,
               "mjlab tasks take actions in [-1, 1] and scale them themselves; set env.rescale_action=false")
    device = cfg.env.device
    if device is not None and re.fullmatch(r"cpu|cuda(:\d+)?", device) is None:
        yield ("env.device", device, "must be null (the agent's device), cpu, cuda or cuda:N")
