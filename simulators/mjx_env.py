"""``num_envs`` copies of one Brax MuJoCo task on the MJX backend, vmapped, with a pure-JAX reset / step.

The task itself (model, observation, reward, its own termination) is Brax's (``brax.envs.get_environment(name,
backend="mjx")``); this module adds what the agents need around it, in the same shape as the gymnasium path
(``agent_common.envs``):

* actions in [-1, 1] rescaled to the actuators' control range (``rescale_action``, as gymnasium's RescaleAction);
* an episode-length limit (``max_episode_steps``, default 1000): ``truncated`` is 1 at the limit, ``terminated``
  is the task's own end (a fallen hopper); both can be 1 at once, as gymnasium's TimeLimit reports them;
* automatic reset inside ``step``: an env whose episode ended is reset with a fresh key (a new random initial
  state), ``obs`` is the reset observation and ``final_obs`` the true last observation of the ended episode, so a
  truncated transition can bootstrap from it (for envs that did not end, ``final_obs`` equals ``obs``);
* seeding from one key (``reset(key)``; ``init(seed)`` jits it for the run seed): the same key gives the same
  initial states and, with the same actions, the same trajectory, resets included.

Everything is a pure function of its inputs: ``reset`` and ``step`` can be jitted, vmapped or run inside
``lax.scan``. The state is a pytree (``MjxEnvState``) that lives on the device.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from simulators.mjx import TASKS as MJX_TASKS

# Brax 0.12 warns on every env that its own pipelines are unmaintained (the MJX backend used here is MuJoCo's), jaxopt
# (imported by brax) that it is unmaintained, and brax's MJX pipeline reads two Data fields by deprecated names.
warnings.filterwarnings("ignore", message=r"Brax System, piplines and environments", category=UserWarning)
warnings.filterwarnings("ignore", message=r"JAXopt is no longer maintained", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=r"Accessing `(contact|ncon)` directly", category=DeprecationWarning)

__all__ = ["DEFAULT_MAX_EPISODE_STEPS", "FAST_COMPILE_ENV", "MjxEnvState", "MjxStep", "MjxVecEnv", "cached_mjx_env",
           "compiler_options", "key_from_seed", "make_env", "make_mjx_env"]

DEFAULT_MAX_EPISODE_STEPS = 1000
"""Episode-length limit when none is given: the gymnasium tasks' TimeLimit."""


class MjxEnvState(NamedTuple):
    """The batched environment state, a pytree on the device.

    Attributes:
        env_state: Brax's ``State`` of every env (physics, observation, reward, done), leaves with a leading (E,).
        steps: (E,) int32 steps taken in each env's current episode.
        key: PRNG key for the next resets.
    """

    env_state: Any
    steps: jax.Array
    key: jax.Array


class MjxStep(NamedTuple):
    """What ``MjxVecEnv.step`` returns (a tuple: ``state, obs, reward, terminated, truncated, final_obs``).

    Attributes:
        state: the next ``MjxEnvState`` (finished envs already reset).
        obs: (E, O) float32, what the policy sees next: the reset observation where an episode ended.
        reward: (E,) float32 reward of this step.
        terminated: (E,) float32 in {0, 1}, the task ended the episode (masks the bootstrap).
        truncated: (E,) float32 in {0, 1}, the episode reached ``max_episode_steps`` (still bootstraps).
        final_obs: (E, O) float32, the TRUE successor of this step: the last observation of an ended episode,
            else equal to ``obs``. The transition to store is (obs_before, action, reward, terminated, final_obs).
    """

    state: MjxEnvState
    obs: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array


FAST_COMPILE_ENV = "FLASHSAC_MJX_FAST_COMPILE"
"""``FLASHSAC_MJX_FAST_COMPILE=1``: compile MJX programs with XLA's backend optimisations off (the CPU tests: compiles
about twice as fast, steps slower)."""


def compiler_options() -> dict[str, Any] | None:
    """``jax.jit``'s ``compiler_options`` for MJX programs: None, or XLA's backend optimisations off when
    ``FAST_COMPILE_ENV`` is ``1`` (read when called)."""
    if os.environ.get(FAST_COMPILE_ENV) != "1":
        return None
    return {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def key_from_seed(seed: int) -> jax.Array:
    """The environments' root key for a run seed (an integer in [0, 2**31 - 1])."""
    return jax.random.PRNGKey(int(seed))


def _strong(tree: Any) -> Any:
    """Every leaf without JAX's weak type (Brax's ``step`` returns some Python-float fields weakly typed, its
    ``reset`` does not), so the state has one type from reset on: a ``lax.scan`` carry must, and a jitted ``step``
    would otherwise compile twice."""
    return jax.tree_util.tree_map(lambda x: jax.lax.convert_element_type(x, jnp.result_type(x)), tree)


def _where_rows(mask: jax.Array, yes: Any, no: Any) -> Any:
    """Per-env select over two batched pytrees: rows of ``yes`` where ``mask`` (E,), else rows of ``no``."""

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        m = mask.reshape(mask.shape + (1,) * (b.ndim - 1))
        return jnp.where(m, a.astype(b.dtype), b)

    return jax.tree_util.tree_map(pick, yes, no)


class MjxVecEnv:
    """``num_envs`` copies of one Brax MuJoCo task on MJX (see the module doc).

    Attributes:
        task: the task name (one of ``MJX_TASKS``).
        num_envs: E.
        max_episode_steps: the episode-length limit.
        observation_size: O.
        action_size: A.
        action_low / action_high: (A,) float32 bounds of the actions ``step`` takes: [-1, 1] with
            ``rescale_action``, else the actuators' control range.
        ctrl_low / ctrl_high: (A,) float32 actuator control range.
        dt: seconds of simulated time per step.
        jit_reset / jit_step: ``jax.jit`` of ``reset`` / ``step`` (``compiler_options()`` at construction), compiled
            on first use and shared by every caller.
    """

    def __init__(
        self, task: str, num_envs: int, max_episode_steps: int | None = None, rescale_action: bool = True
    ) -> None:
        if task not in MJX_TASKS:
            raise ValueError(f"task: expected one of {', '.join(MJX_TASKS)}, got {task!r}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs: expected an integer >= 1, got {num_envs!r}")
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int | np.integer)
        ):
            raise ValueError(f"max_episode_steps: expected an integer or None, got {max_episode_steps!r}")
        from brax import envs as brax_envs  # the mjx extra

        self.task = task
        self.num_envs = int(num_envs)
        steps = max_episode_steps if (max_episode_steps is not None and max_episode_steps > 0) else None
        self.max_episode_steps = int(steps) if steps is not None else DEFAULT_MAX_EPISODE_STEPS
        self.rescale_action = bool(rescale_action)
        self.brax_env = brax_envs.get_environment(task, backend="mjx")
        model = self.brax_env.sys.mj_model  # the MjModel the MJX model was built from
        self.mj_model = model
        self.action_size = int(self.brax_env.action_size)
        limited = np.asarray(model.actuator_ctrllimited, dtype=bool)  # (A,)
        ctrl_range = np.asarray(model.actuator_ctrlrange, dtype=np.float64)  # (A, 2)
        if self.rescale_action and not limited.all():
            raise ValueError(f"task {task!r}: rescale_action needs every actuator to have a control range")
        self.ctrl_low = np.where(limited, ctrl_range[:, 0], -np.inf).astype(np.float32)  # (A,)
        self.ctrl_high = np.where(limited, ctrl_range[:, 1], np.inf).astype(np.float32)  # (A,)
        if self.rescale_action:
            self.action_low = np.full(self.action_size, -1.0, dtype=np.float32)
            self.action_high = np.full(self.action_size, 1.0, dtype=np.float32)
        else:
            self.action_low, self.action_high = self.ctrl_low, self.ctrl_high
        # Brax's observation_size property runs a reset op by op (a minute on a CPU); shapes need only tracing.
        shapes = jax.eval_shape(self.brax_env.reset, jax.random.PRNGKey(0))
        self.observation_size = int(shapes.obs.shape[-1])
        self.dt = float(self.brax_env.dt)
        options = compiler_options()
        self.jit_reset = jax.jit(self.reset, compiler_options=options)  # compiled on first use
        self.jit_step = jax.jit(self.step, compiler_options=options)

    def __repr__(self) -> str:
        return (f"MjxVecEnv(task={self.task!r}, num_envs={self.num_envs}, max_episode_steps={self.max_episode_steps}, "
                f"rescale_action={self.rescale_action})")

    # ------------------------------------------------------------------------------------------------ pure JAX

    def to_ctrl(self, action: jax.Array) -> jax.Array:
        """(E, A) actions in ``[action_low, action_high]`` -> actuator controls (the affine map of RescaleAction)."""
        action = jnp.asarray(action, jnp.float32)
        if not self.rescale_action:
            return action
        low, high = jnp.asarray(self.ctrl_low), jnp.asarray(self.ctrl_high)
        return low + (action + 1.0) * (0.5 * (high - low))

    def _reset_envs(self, key: jax.Array) -> Any:
        return _strong(jax.vmap(self.brax_env.reset)(jax.random.split(key, self.num_envs)))

    def reset(self, key: jax.Array) -> MjxEnvState:
        """Fresh random initial states of every env from ``key`` (each env gets its own subkey)."""
        key, sub = jax.random.split(key)
        return MjxEnvState(self._reset_envs(sub), jnp.zeros(self.num_envs, jnp.int32), key)

    def init(self, seed: int) -> MjxEnvState:
        """The first state for a run seed: ``reset(key_from_seed(seed))`` under ``jax.jit``.

        Use this (or call ``reset`` inside a jitted program) rather than an eager ``reset``: MJX's eager ops leave
        most of the state's arrays committed to the device while jitted outputs are not, so a jitted ``step`` fed an
        eager state compiles once for it and again for every later state.
        """
        return self.jit_reset(key_from_seed(seed))

    def observation(self, state: MjxEnvState) -> jax.Array:
        """(E, O) float32 current observation of every env."""
        return state.env_state.obs.astype(jnp.float32)

    def positions(self, state: MjxEnvState) -> jax.Array:
        """(E, nq) joint positions of every env (the physics' ``qpos``: what a renderer needs to pose ``mj_model``)."""
        return state.env_state.pipeline_state.qpos

    def step(self, state: MjxEnvState, action: jax.Array) -> MjxStep:
        """One step of every env, resetting the envs whose episode ended (see ``MjxStep``).

        Args:
            state: the current state.
            action: (E, A) actions in ``[action_low, action_high]``.

        Returns:
            ``MjxStep(state, obs, reward, terminated, truncated, final_obs)``.
        """
        expected = (self.num_envs, self.action_size)
        action = jnp.asarray(action)
        if tuple(action.shape) != expected:
            raise ValueError(f"action: expected shape {expected}, got {tuple(action.shape)}")
        stepped = _strong(jax.vmap(self.brax_env.step)(state.env_state, self.to_ctrl(action)))
        steps = state.steps + 1
        terminated = stepped.done > 0.5  # (E,)
        truncated = steps >= self.max_episode_steps  # (E,)
        done = terminated | truncated  # (E,)
        key, reset_key = jax.random.split(state.key)

        def with_resets(_: None) -> Any:
            return _where_rows(done, self._reset_envs(reset_key), stepped)

        # Resets are computed only on steps where some env finished (every step of a synchronous time limit
        # would otherwise pay for a full reset of every env).
        env_state = jax.lax.cond(jnp.any(done), with_resets, lambda _: stepped, None)
        next_state = MjxEnvState(env_state, jnp.where(done, 0, steps).astype(jnp.int32), key)
        return MjxStep(
            state=next_state,
            obs=env_state.obs.astype(jnp.float32),
            reward=stepped.reward.astype(jnp.float32),
            terminated=terminated.astype(jnp.float32),
            truncated=truncated.astype(jnp.float32),
            final_obs=stepped.obs.astype(jnp.float32),
        )


def make_mjx_env(
    task: str, num_envs: int, max_episode_steps: int | None = None, rescale_action: bool = True
) -> MjxVecEnv:
    """``num_envs`` copies of the MJX ``task`` (one of ``MJX_TASKS``).

    Args:
        task: Brax task name: halfcheetah, hopper, walker2d, ant or humanoid.
        num_envs: E, the vmapped batch (thousands fit on one GPU).
        max_episode_steps: a positive value sets the episode-length limit; None or <= 0 keeps 1000.
        rescale_action: ``step`` takes actions in [-1, 1] (mapped onto the actuators' control range).

    Returns:
        The environment; call ``reset(key_from_seed(seed))`` for its first state.

    Raises:
        ValueError: an unknown task or a bad ``num_envs`` / ``max_episode_steps``, naming the argument.
    """
    return MjxVecEnv(task, num_envs, max_episode_steps, rescale_action)


def make_env(cfg: Any, num_envs: int, seed: int, device: Any = None) -> MjxVecEnv:
    """The envs of a config (``simulators.mjx.ENV_MODULE``): ``num_envs`` copies of its task, one per configuration in
    a process (``cached_mjx_env``); the seed enters at the reset (``init(seed)``), the device is JAX's default."""
    env = cfg.env
    return cached_mjx_env(env.env_name, int(num_envs), env.max_episode_steps, bool(env.rescale_action))


@functools.lru_cache(maxsize=8)
def cached_mjx_env(task: str, num_envs: int, max_episode_steps: int | None = None,
                   rescale_action: bool = True) -> MjxVecEnv:
    """``make_mjx_env``, one per configuration in a process: its jitted reset and step (and the programs an agent
    caches by the env's identity) compile once, so a resume in the same process, a second run of the same
    configuration, or evaluation envs as many as the training ones reuse them."""
    return make_mjx_env(task, num_envs, max_episode_steps, rescale_action)
