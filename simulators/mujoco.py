"""gymnasium's MuJoCo tasks (``env.env_type=mujoco``, the default): upstream's CPU-simulator recipe.

The task is ``gym.make(env_name)``; ``agent_common.envs`` adds RescaleAction, the episode limit and the snapshot
wrapper. The only simulator whose envs render themselves (``render_mode="rgb_array"``, the tracking camera).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from simulators.base import HOST, Problem

__all__ = ["NAME", "TASKS", "check", "make", "missing"]

NAME = "mujoco"
TASKS: tuple[str, ...] = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")
"""gym-MuJoCo tasks of upstream's CPU-sim recipe (docs/flashsac.md)."""
SUMMARY = "gymnasium MuJoCo: HalfCheetah, Hopper, Walker2d, Ant, Humanoid (v4)"
EXTRA = None
NEEDS = ""
INSTALL = ""
MODULES: tuple[str, ...] = ()
STEPPER = HOST
FRAMEWORKS: tuple[str, ...] = ("torch", "jax")
ONLY_FRAMEWORKS = None
RESCALE_ACTION = True
RECORDS_VIDEO = None
OWN_KEYS: dict[str, str] = {}
EPISODE_STEPS = None  # the registered TimeLimit (1000)
RENDERS_ITSELF = True  # gymnasium's render_mode="rgb_array" (agent_common.video films it from its "track" camera)

# gymnasium 1.x warns that -v4 ids are out of date; upstream's recipe uses -v4 on purpose (docs/flashsac.md).
warnings.filterwarnings("ignore", message=r".*The environment .* is out of date", category=DeprecationWarning)


def missing() -> list[str]:
    """Nothing: gymnasium's MuJoCo tasks are always installed."""
    return []


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """No checks of its own (the config checks its extra)."""
    return iter(())


def make(env_name: str, seed: int, render_size: int | None = None) -> Any:
    """The gymnasium task, rendering at ``render_size`` pixels when given."""
    import gymnasium as gym

    if render_size is None:
        return gym.make(env_name)
    return gym.make(env_name, render_mode="rgb_array", width=render_size, height=render_size)


def model_data(base: Any) -> tuple[Any, Any]:
    """The task's ``MjModel`` and ``MjData``."""
    return base.model, base.data


def control_timestep(base: Any) -> float:
    """Seconds per env step."""
    return float(base.dt)


SNAPSHOT_KEYS: tuple[str, ...] = ("np_random",)


def task_state(base: Any) -> dict[str, Any]:
    """The env's random generator (gymnasium's ``np_random``)."""
    return {"np_random": base.np_random.bit_generator.state}


def set_task_state(base: Any, snapshot: dict[str, Any], restore_physics: Callable[[], None]) -> None:
    """Restores ``task_state`` output after the physics."""
    restore_physics()
    base.np_random.bit_generator.state = snapshot["np_random"]
