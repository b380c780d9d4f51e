"""MyoSuite's hand tasks (``env.env_type=myosuite``) as upstream's ``make_myosuite_env``.

Upstream's names (``TASKS``) make the registered MyoSuite env with its own episode limit; ``info["success"]`` comes
from MyoSuite's ``solved``; both spaces are float32. Needs the ``myosuite`` extra, imported only when an env is built.
A snapshot holds the episode's task state and the model arrays MyoSuite's reset rewrites (``MODEL_FIELDS``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from simulators.base import HOST, Problem, missing_modules

__all__ = ["MODEL_FIELDS", "NAME", "TASKS", "check", "make", "missing"]

NAME = "myosuite"
TASK_IDS: dict[str, str] = {
    "myo-reach": "myoHandReachFixed-v0",
    "myo-reach-hard": "myoHandReachRandom-v0",
    "myo-pose": "myoHandPoseFixed-v0",
    "myo-pose-hard": "myoHandPoseRandom-v0",
    "myo-obj-hold": "myoHandObjHoldFixed-v0",
    "myo-obj-hold-hard": "myoHandObjHoldRandom-v0",
    "myo-key-turn": "myoHandKeyTurnFixed-v0",
    "myo-key-turn-hard": "myoHandKeyTurnRandom-v0",
    "myo-pen-twirl": "myoHandPenTwirlFixed-v0",
    "myo-pen-twirl-hard": "myoHandPenTwirlRandom-v0",
}
"""MyoSuite tasks as upstream names them (its ``MYOSUITE_TASKS_DICT``: the ten hand tasks of its published results),
with the MyoSuite environment id each one makes."""
TASKS: tuple[str, ...] = tuple(TASK_IDS)
SUMMARY = "MyoSuite's hand tasks as upstream names them (`myo-reach`, `myo-pen-twirl`, ..., each with `-hard`)"
EXTRA = "myosuite"
NEEDS = "the MyoSuite tasks need the myosuite extra"
INSTALL = '-e ".[myosuite]"'
MODULES: tuple[str, ...] = ("myosuite",)
STEPPER = HOST
FRAMEWORKS: tuple[str, ...] = ("torch", "jax")
ONLY_FRAMEWORKS = None
RESCALE_ACTION = True
RECORDS_VIDEO = None
OWN_KEYS: dict[str, str] = {}
EPISODE_STEPS = None  # the registered limit, 50 to 200 steps
RENDERS_ITSELF = False  # agent_common.video films it with mujoco.Renderer on its physics
SNAPSHOT_KEYS: tuple[str, ...] = ("np_random", "myo_task_state", "myo_model")

MODEL_FIELDS: tuple[str, ...] = (
    "body_pos", "body_quat", "dof_length", "geom_aabb", "geom_rbound", "geom_size", "site_pos", "site_size",
)
"""The ``MjModel`` arrays MyoSuite's tasks rewrite when an episode starts (targets, the key's and the pen's pose, the
held object's size and what MuJoCo derives from it); a snapshot holds them and the bodies' bounding volumes (the
first ``body_bvhnum.sum()`` rows of ``bvh_aabb``; the meshes' own follow and never change)."""


def missing() -> list[str]:
    """The modules of ``MODULES`` that are not installed."""
    return missing_modules(MODULES)


def check(cfg: Any, framework: str) -> Iterator[Problem]:
    """No checks of its own (the config checks its extra)."""
    return iter(())


def make(env_name: str, seed: int, render_size: int | None = None) -> Any:
    """A MyoSuite task as upstream ``make_myosuite_env``: the registered env (with its own TimeLimit), success from
    ``solved``, both spaces float32."""
    if render_size is not None:
        raise ValueError("render_size: evaluation videos are recorded for gymnasium tasks (env_type mujoco) only")
    absent = missing()
    if absent:
        raise ImportError(f"env.env_type=myosuite needs the myosuite extra (pip install -e \".[myosuite]\"); not "
                          f"installed: {', '.join(absent)}")
    import gymnasium as gym
    import myosuite  # noqa: F401  (registers MyoSuite's envs with gymnasium)

    from simulators.wrappers import Float32Observation

    class MyoSuiteSuccess(gym.Wrapper):
        """``info["success"]`` from MyoSuite's ``solved`` (as upstream's wrapper); the info's per-step dicts of
        observations and reward terms (``obs_dict``, ``rwd_dict``) are left out, so a vector env's workers send
        only numbers."""

        def step(self, action: np.ndarray) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
            obs, reward, terminated, truncated, info = self.env.step(action)
            info = {key: value for key, value in info.items() if key not in ("obs_dict", "rwd_dict")}
            info["success"] = bool(np.asarray(info["solved"]).item())
            return obs, reward, terminated, truncated, info

    return Float32Observation(MyoSuiteSuccess(gym.make(TASK_IDS[env_name])))


def model_data(base: Any) -> tuple[Any, Any]:
    """The task's ``MjModel`` and ``MjData``."""
    return base.model, base.data


def control_timestep(base: Any) -> float:
    """Seconds per env step."""
    return float(base.dt)


def task_state(base: Any) -> dict[str, Any]:
    """The env's random generator, the episode's task state and the model arrays its reset rewrote."""
    model = base.model
    fields = {name: getattr(model, name).copy() for name in MODEL_FIELDS}
    fields["bvh_aabb"] = model.bvh_aabb[: int(model.body_bvhnum.sum())].copy()
    return {"np_random": base.np_random.bit_generator.state, "myo_task_state": copy.deepcopy(base._task_state),
            "myo_model": fields}


def set_task_state(base: Any, snapshot: dict[str, Any], restore_physics: Callable[[], None]) -> None:
    """Restores ``task_state`` output: the episode's model arrays first (the physics' ``mj_forward`` reads them).

    Raises:
        ValueError: a model array of another shape than the snapshot's.
    """
    model = base.model
    for name, value in snapshot["myo_model"].items():
        target = getattr(model, name)
        rows = target[: len(value)] if name == "bvh_aabb" else target
        if rows.shape != np.shape(value):
            raise ValueError(f"env snapshot does not match the env: MjModel.{name} has shape {rows.shape}, "
                             f"the snapshot's {np.shape(value)}")
        rows[...] = value
    base._task_state = copy.deepcopy(snapshot["myo_task_state"])
    restore_physics()
    base.np_random.bit_generator.state = snapshot["np_random"]
