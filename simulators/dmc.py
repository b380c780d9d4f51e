"""DeepMind Control suite tasks through shimmy (``env.env_type=dmc``), as upstream's ``make_dmc_env``.

The dict observation is flattened and cast to float32, episodes last ``EPISODE_STEPS`` unless
``env.max_episode_steps`` says otherwise, no action repeat. Needs the ``dmc`` extra (dm-control, shimmy), imported
only when an env is built. A snapshot holds the task's legacy ``RandomState`` and the dm_control environment's own
step counter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from simulators.base import HOST, Problem, missing_modules

__all__ = ["EPISODE_STEPS", "NAME", "TASKS", "check", "make", "missing"]

NAME = "dmc"
TASKS: tuple[str, ...] = (
    "acrobot-swingup", "acrobot-swingup_sparse", "ball_in_cup-catch", "cartpole-balance", "cartpole-balance_sparse",
    "cartpole-swingup", "cartpole-swingup_sparse", "cartpole-three_poles", "cartpole-two_poles", "cheetah-run",
    "dog-fetch", "dog-run", "dog-stand", "dog-trot", "dog-walk", "finger-spin", "finger-turn_easy",
    "finger-turn_hard", "fish-swim", "fish-upright", "hopper-hop", "hopper-stand", "humanoid-run",
    "humanoid-run_pure_state", "humanoid-stand", "humanoid-walk", "humanoid_CMU-run", "humanoid_CMU-stand",
    "humanoid_CMU-walk", "lqr-lqr_2_1", "lqr-lqr_6_2", "manipulator-bring_ball", "manipulator-bring_peg",
    "manipulator-insert_ball", "manipulator-insert_peg", "pendulum-swingup", "point_mass-easy", "point_mass-hard",
    "quadruped-escape", "quadruped-fetch", "quadruped-run", "quadruped-walk", "reacher-easy", "reacher-hard",
    "stacker-stack_2", "stacker-stack_4", "swimmer-swimmer15", "swimmer-swimmer6", "walker-run", "walker-stand",
    "walker-walk",
)
"""DeepMind Control suite tasks as upstream names them, ``<domain>-<task>``: every entry of
``dm_control.suite.ALL_TASKS`` (tests/test_dmc_envs.py checks the list against the installed dm_control)."""
SUMMARY = "DeepMind Control `<domain>-<task>` through shimmy (e.g. `cheetah-run`, `humanoid-walk`)"
EXTRA = "dmc"
NEEDS = "the DeepMind Control tasks need the dmc extra"
INSTALL = '-e ".[dmc]"'
MODULES: tuple[str, ...] = ("dm_control", "shimmy")
STEPPER = HOST
FRAMEWORKS: tuple[str, ...] = ("torch", "jax")
ONLY_FRAMEWORKS = None
RESCALE_ACTION = True
RECORDS_VIDEO = None
OWN_KEYS: dict[str, str] = {}
EPISODE_STEPS = 1000
"""A DMC episode's length when ``env.max_episode_steps`` is null (upstream ``configs/env/dmc.yaml``)."""
RENDERS_ITSELF = False  # agent_common.video films it with mujoco.Renderer on its physics
SNAPSHOT_KEYS: tuple[str, ...] = ("np_random", "dm_step")


def missing() -> list[str]:
    """The modules of ``MODULES`` that are not installed."""
    return missing_modules(MODULES)


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """No checks of its own (the config checks its extra)."""
    return iter(())


def make(env_name: str, seed: int, render_size: int | None = None) -> Any:
    """A DMC suite task through shimmy, as upstream ``make_dmc_env`` (flattened observation), cast to float32; its
    random state is created from ``seed`` (``task_kwargs={"random": seed}``, as upstream)."""
    if render_size is not None:
        raise ValueError("render_size: a DMC env has no gymnasium render_mode; agent_common.video films it with "
                         "mujoco.Renderer (render_size=None)")
    absent = missing()
    if absent:
        raise ImportError(f"env.env_type=dmc needs the dmc extra (pip install -e \".[dmc]\"); not installed: "
                          f"{', '.join(absent)}")
    import gymnasium as gym
    from dm_control import suite
    from gymnasium.wrappers import FlattenObservation
    from shimmy import DmControlCompatibilityV0

    from simulators.wrappers import Float32Observation

    domain, task = env_name.split("-")
    env: gym.Env = DmControlCompatibilityV0(suite.load(domain_name=domain, task_name=task,
                                                       task_kwargs={"random": seed}))
    if isinstance(env.observation_space, gym.spaces.Dict):
        env = FlattenObservation(env)
    return Float32Observation(env)


def model_data(base: Any) -> tuple[Any, Any]:
    """The ``MjModel`` and ``MjData`` of shimmy's dm_control env (its physics)."""
    physics = base._env.physics
    return physics.model.ptr, physics.data.ptr


def control_timestep(base: Any) -> float:
    """Seconds per env step."""
    return float(base._env.control_timestep())


def task_state(base: Any) -> dict[str, Any]:
    """The task's legacy ``RandomState`` and the dm_control environment's episode counter."""
    dm_env = base._env
    return {"np_random": base.np_random.get_state(), "dm_step": [dm_env._step_count, dm_env._reset_next_step]}


def set_task_state(base: Any, snapshot: dict[str, Any], restore_physics: Callable[[], None]) -> None:
    """Restores ``task_state`` output after the physics."""
    restore_physics()
    base.np_random.set_state(snapshot["np_random"])
    base._env._step_count, base._env._reset_next_step = snapshot["dm_step"]
