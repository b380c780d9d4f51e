"""``num_envs`` copies of one MuJoCo Playground task on MJX, with the same pure-JAX API as ``simulators.mjx_env``.

``PlaygroundVecEnv`` is an ``MjxVecEnv`` whose task is a MuJoCo Playground environment (``env.env_type=
mujoco_playground``, task names ``simulators.playground.TASKS``) instead of a Brax one; the episode limit,
the resets inside ``step``, ``final_obs`` and the seeding are ``MjxVecEnv``'s. Differences:

* the physics is MJX's pure-JAX engine (``impl="jax"``), which runs inside the agents' jitted programs on the CPU
  and the GPU;
* the task takes its actions in [-1, 1] itself (Playground's convention; upstream's ``rescale_action: null``), so
  ``step`` passes them through unchanged and ``rescale_action`` must be False;
* a task with a dict observation (the locomotion tasks: ``state`` and ``privileged_state``) gives the agent its
  ``state`` entry (the agents have no asymmetric critic input);
* Playground's ``reset`` returns some fields weakly typed that its ``step`` returns strongly typed; the state is made
  strongly typed everywhere (``_strong``), so the reset state has the step's structure and the step compiles once.

The locomotion tasks (``simulators.playground.LOCOMOTION_TASKS``: the G1 / T1 joystick tasks) load their robots from
a MuJoCo Menagerie checkout: ``menagerie_path`` (config ``env.menagerie_path`` or ``$MUJOCO_MENAGERIE_PATH``).
Without one this module raises one line saying where to get it, before Playground is imported: Playground itself
would run a ``git clone`` when such a task is loaded. Needs the ``playground`` extra.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from simulators.mjx_env import DEFAULT_MAX_EPISODE_STEPS, MjxVecEnv, compiler_options
from simulators.playground import LOCOMOTION_TASKS, MENAGERIE_ENV, TASKS, menagerie_problem

__all__ = ["PlaygroundVecEnv", "cached_playground_env", "load_playground_task", "make_env"]


def load_playground_task(task: str, menagerie_path: str | None = None) -> Any:
    """The Playground environment object of ``task`` on MJX's pure-JAX engine.

    Raises:
        ValueError: an unknown task, or a locomotion task without a usable Menagerie checkout (one line: what is
            missing and where to get it), before Playground is imported.
    """
    if task not in TASKS:
        raise ValueError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
    if task in LOCOMOTION_TASKS:
        path = menagerie_path or os.environ.get(MENAGERIE_ENV) or None
        problem = menagerie_problem(task, path)
        if problem:
            raise ValueError(problem)
        from etils import epath
        from mujoco_playground._src import locomotion, mjx_env

        # Playground reads its Menagerie location from this module attribute when a task is built; an existing
        # directory there keeps it from cloning one.
        mjx_env.MENAGERIE_PATH = epath.Path(os.path.abspath(str(path)))
        return locomotion.load(task, config_overrides={"impl": "jax"})
    from mujoco_playground._src import dm_control_suite

    return dm_control_suite.load(task, config_overrides={"impl": "jax"})


def _state_obs(obs: Any) -> jax.Array:
    return obs["state"] if isinstance(obs, dict) else obs


class _StateObservation:
    """A Playground env whose states carry only the policy's observation (``state`` of a dict observation)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, key: jax.Array) -> Any:
        state = self.env.reset(key)
        return state.replace(obs=_state_obs(state.obs))

    def step(self, state: Any, action: jax.Array) -> Any:
        stepped = self.env.step(state, action)
        return stepped.replace(obs=_state_obs(stepped.obs))


class PlaygroundVecEnv(MjxVecEnv):
    """``num_envs`` copies of one MuJoCo Playground task (see the module doc); the attributes are ``MjxVecEnv``'s
    (``brax_env`` is the Playground env, with the policy's observation)."""

    def __init__(
        self,
        task: str,
        num_envs: int,
        max_episode_steps: int | None = None,
        rescale_action: bool = False,
        menagerie_path: str | None = None,
    ) -> None:
        if rescale_action:
            raise ValueError("rescale_action: MuJoCo Playground tasks take actions in [-1, 1] themselves; "
                             "expected False, got True")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs!r}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int | np.integer)
        ):
            raise ValueError(f"max_episode_steps: expected an integer or None, got {max_episode_steps!r}")
        env = load_playground_task(task, menagerie_path)
        self.task = task
        self.num_envs = int(num_envs)
        steps = max_episode_steps if (max_episode_steps is not None and max_episode_steps > 0) else None
        self.max_episode_steps = int(steps) if steps is not None else DEFAULT_MAX_EPISODE_STEPS
        self.rescale_action = False
        self.brax_env = _StateObservation(env)
        self.mj_model = env.mj_model
        self.action_size = int(env.action_size)
        self.ctrl_low = np.full(self.action_size, -1.0, dtype=np.float32)
        self.ctrl_high = np.full(self.action_size, 1.0, dtype=np.float32)
        self.action_low, self.action_high = self.ctrl_low, self.ctrl_high
        shapes = jax.eval_shape(self.brax_env.reset, jax.random.PRNGKey(0))
        self.observation_size = int(shapes.obs.shape[-1])
        self.dt = float(env.dt)
        options = compiler_options()
        self.jit_reset = jax.jit(self.reset, compiler_options=options)
        self.jit_step = jax.jit(self.step, compiler_options=options)

    def __repr__(self) -> str:
        return (f"PlaygroundVecEnv(task={self.task!r}, num_envs={self.num_envs}, "
                f"max_episode_steps={self.max_episode_steps})")

    def to_ctrl(self, action: jax.Array) -> jax.Array:
        """Actions go to the task unchanged (it maps [-1, 1] onto its actuators itself)."""
        return jnp.asarray(action, jnp.float32)

    def positions(self, state: Any) -> jax.Array:
        """(E, nq) joint positions of every env (Playground keeps the physics in ``data``)."""
        return state.env_state.data.qpos


@functools.lru_cache(maxsize=8)
def cached_playground_env(task: str, num_envs: int, max_episode_steps: int | None = None,
                          menagerie_path: str | None = None) -> PlaygroundVecEnv:
    """``PlaygroundVecEnv``, one per configuration in a process (as ``simulators.mjx_env.cached_mjx_env``)."""
    return PlaygroundVecEnv(task, num_envs, max_episode_steps, False, menagerie_path)


def make_env(cfg: Any, num_envs: int, seed: int, device: Any = None) -> PlaygroundVecEnv:
    """The envs of a config (``simulators.playground.ENV_MODULE``): ``num_envs`` copies of its task, one per
    configuration in a process; the seed enters at the reset, the device is JAX's default."""
    env = cfg.env
    return cached_playground_env(env.env_name, int(num_envs), env.max_episode_steps, env.menagerie_path)
