"""The host simulators' envs as upstream builds them: RescaleAction, TimeLimit, SameStep-autoreset vector envs.

The task env itself comes from its simulator module (``simulators.mujoco``, ``simulators.dmc``,
``simulators.myosuite``: ``make``); this module wraps it the same way for every host simulator, vectorises it,
steps it (``step_env``: the true final observation of a finished episode), evaluates a policy on it and snapshots
every sub-env's complete state for an exact resume (``EnvSnapshot``, with the simulator's own part of the state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.wrappers import RescaleAction, TimeLimit

from simulators import HOST, SIMULATORS, simulator

__all__ = [
    "EnvSnapshot",
    "StepResult",
    "evaluate",
    "get_env_states",
    "make_env",
    "make_vec_env",
    "set_env_states",
    "step_env",
]


class EnvSnapshot(gym.Wrapper):
    """Outermost wrapper that can save and restore the complete env state, for exact resume.

    The state is the MuJoCo integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time, qpos, qvel,
    act, warm-start, controls, ...), every ``TimeLimit``'s elapsed-step counter, and the simulator's own part
    (``task_state``: the env's random-generator state; a DMC task's step counter; a MyoSuite episode's task state
    and model arrays). Exposed as methods so ``VectorEnv.call`` reaches them for sync and async vector envs.

    Args:
        env: the wrapped task.
        index: position in the vector env, so one broadcast call can restore every worker.
        env_type: its simulator (``simulators.SIMULATORS``).
    """

    def __init__(self, env: gym.Env, index: int = 0, env_type: str = "mujoco") -> None:
        super().__init__(env)
        self.index = index
        self.sim = simulator(env_type)

    def model_data(self) -> tuple[Any, Any]:
        """The task's ``MjModel`` and ``MjData``."""
        return self.sim.model_data(self.env.unwrapped)

    def control_timestep(self) -> float:
        """Seconds per env step."""
        return self.sim.control_timestep(self.env.unwrapped)

    def get_snapshot(self) -> dict[str, Any]:
        """Returns a picklable dict with the full env state."""
        model, data = self.model_data()
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
        mujoco.mj_getState(model, data, state, spec)
        return {"mj_state": state, "elapsed_steps": [w._elapsed_steps for w in _time_limits(self.env)],
                **self.sim.task_state(self.env.unwrapped)}

    def set_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Restores a state produced by ``get_snapshot`` (the env must have been reset once).

        Raises:
            ValueError: a snapshot of another simulator or wrapper chain.
        """
        own = set(snapshot) - {"mj_state", "elapsed_steps"}
        if own != set(self.sim.SNAPSHOT_KEYS):
            raise ValueError(f"env snapshot does not match the env: it holds {sorted(own)}, a {self.sim.NAME} env's "
                             f"holds {sorted(self.sim.SNAPSHOT_KEYS)}")
        limits = _time_limits(self.env)
        if len(limits) != len(snapshot["elapsed_steps"]):
            raise ValueError("env snapshot does not match the wrapper chain (different TimeLimit count)")
        model, data = self.model_data()

        def restore_physics() -> None:
            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            mujoco.mj_setState(model, data, np.asarray(snapshot["mj_state"], dtype=np.float64), spec)
            mujoco.mj_forward(model, data)

        self.sim.set_task_state(self.env.unwrapped, snapshot, restore_physics)
        for wrapper, steps in zip(limits, snapshot["elapsed_steps"], strict=True):
            wrapper._elapsed_steps = steps

    def set_snapshots(self, snapshots: list[dict[str, Any]]) -> None:
        """Restores this env's entry of a vector env's list of snapshots."""
        self.set_snapshot(snapshots[self.index])


def _time_limits(env: gym.Env) -> list[TimeLimit]:
    out = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, TimeLimit):
            out.append(env)
        env = env.env
    return out


HOST_ENV_TYPES: tuple[str, ...] = tuple(name for name, sim in SIMULATORS.items() if sim.STEPPER == HOST)


def make_env(
    env_name: str,
    seed: int,
    rescale_action: bool = True,
    max_episode_steps: int | None = None,
    index: int = 0,
    env_type: str = "mujoco",
    render_size: int | None = None,
) -> gym.Env:
    """One host-simulator env, wrapped as upstream's ``make_mujoco_env`` / ``make_dmc_env`` / ``make_myosuite_env``
    and ``create_vec_env``.

    Args:
        env_name: one of the simulator's ``TASKS`` (e.g. ``"HalfCheetah-v4"``, ``"cheetah-run"``, ``"myo-reach"``).
        seed: seeds the observation and action spaces (the env itself is seeded by ``reset(seed=...)``); the
            simulator's ``make`` may use it too (a DMC task's random state).
        rescale_action: wrap ``RescaleAction`` to [-1, 1] with float32 bounds.
        max_episode_steps: a positive value overrides the task's TimeLimit; ``None`` or <= 0 keeps it (the
            simulator's ``EPISODE_STEPS`` where it has one, else the registered limit).
        index: position of this env in its vector env.
        env_type: a host simulator (``"mujoco"``, ``"dmc"`` or ``"myosuite"``).
        render_size: build the env rendering at this width and height (None: no renderer; only a simulator that
            ``RENDERS_ITSELF``: ``agent_common.video`` films the others with ``mujoco.Renderer``).

    Returns:
        The wrapped env; its outermost wrapper is ``EnvSnapshot``.
    """
    if env_type not in HOST_ENV_TYPES:
        raise ValueError(f"env_type: expected one of {', '.join(repr(t) for t in HOST_ENV_TYPES)} (the host "
                         f"simulators), got {env_type!r}")
    sim = simulator(env_type)
    if env_name not in sim.TASKS:
        raise ValueError(f"unsupported env {env_name!r} for env_type {env_type!r}; supported: {', '.join(sim.TASKS)}")
    env = sim.make(env_name, seed, render_size)
    if (max_episode_steps is None or max_episode_steps <= 0) and sim.EPISODE_STEPS is not None:
        max_episode_steps = sim.EPISODE_STEPS
    if rescale_action:
        env = RescaleAction(env, np.float32(-1.0), np.float32(1.0))
    limits = _time_limits(env)
    predefined = limits[0]._max_episode_steps if limits else None
    steps = max_episode_steps if (max_episode_steps is not None and max_episode_steps > 0) else predefined
    if steps is not None:
        env = TimeLimit(env, steps)
    env.observation_space.seed(seed)
    env.action_space.seed(seed)
    return EnvSnapshot(env, index, env_type)


def make_vec_env(
    env_name: str,
    num_envs: int,
    seed: int,
    rescale_action: bool = True,
    max_episode_steps: int | None = None,
    env_type: str = "mujoco",
) -> gym.vector.VectorEnv:
    """A vector env with same-step autoreset (the done env is reset inside ``step``; ``infos["final_obs"]``).

    Sub-env i uses seed + i. ``SyncVectorEnv`` for one env, ``AsyncVectorEnv`` (spawn) otherwise, as upstream.
    Call ``reset(seed=seed)`` once before stepping.

    Args:
        env_name: task id.
        num_envs: number of sub-envs.
        seed: base seed.
        rescale_action: see ``make_env``.
        max_episode_steps: see ``make_env``.
        env_type: see ``make_env``.

    Returns:
        The vector env.
    """
    fns: list[Callable[[], gym.Env]] = [
        (lambda i=i: make_env(env_name, seed + i, rescale_action, max_episode_steps, i, env_type))
        for i in range(num_envs)
    ]
    mode = gym.vector.AutoresetMode.SAME_STEP
    if num_envs == 1:
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode, context="spawn")


def get_env_states(envs: gym.vector.VectorEnv) -> list[dict[str, Any]]:
    """Snapshots of every sub-env (see ``EnvSnapshot``)."""
    return list(envs.call("get_snapshot"))


def set_env_states(envs: gym.vector.VectorEnv, states: list[dict[str, Any]]) -> None:
    """Restores snapshots from ``get_env_states`` into a vector env that has been reset once."""
    if len(states) != envs.num_envs:
        raise ValueError(f"got {len(states)} env states for {envs.num_envs} envs")
    # VectorEnv.call passes the same args to every worker, so each sub-env picks its own entry by index.
    envs.call("set_snapshots", states)


@dataclass(frozen=True)
class StepResult:
    """One vector-env step, split the way the buffer needs it.

    Attributes:
        next_observation: (E, O) float32; the TRUE successor of each env (``final_obs`` where the episode ended).
        reset_observation: (E, O) float32; what the policy sees next (the reset obs where the episode ended).
        reward: (E,) float32 raw env reward.
        terminated: (E,) float32 in {0, 1}; masks the bootstrap.
        truncated: (E,) float32 in {0, 1}; time limit, still bootstraps from ``next_observation``.
        info: the vector env's info dict.
    """

    next_observation: np.ndarray
    reset_observation: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: dict[str, Any]


def step_env(envs: gym.vector.VectorEnv, action: np.ndarray) -> StepResult:
    """Steps a SameStep-autoreset vector env and recovers the true final observation of finished episodes.

    Paper-era rule (docs/flashsac.md): the final observation replaces the reset observation for terminated
    *or* truncated envs. Only ``terminated`` masks the bootstrap, so truncated transitions bootstrap from the
    true final observation and terminated ones do not bootstrap at all.

    Args:
        envs: a vector env from ``make_vec_env``.
        action: (E, A) actions in the env's (rescaled) action space.

    Returns:
        A ``StepResult``; raises ``FloatingPointError`` if the env returns a non-finite observation or reward.
    """
    obs, reward, terminated, truncated, info = envs.step(action)
    reset_obs = np.asarray(obs, dtype=np.float32)  # (E, O)
    next_obs = reset_obs.copy()  # (E, O)
    done = np.logical_or(terminated, truncated)  # (E,)
    if done.any():
        final_obs = info["final_obs"]  # object array (E,)
        for i in np.flatnonzero(done):
            next_obs[i] = np.asarray(final_obs[i], dtype=np.float32)  # (O,)
    reward = np.asarray(reward, dtype=np.float32)  # (E,)
    if not (np.isfinite(next_obs).all() and np.isfinite(reset_obs).all()):
        raise FloatingPointError("environment returned a non-finite observation")
    if not np.isfinite(reward).all():
        raise FloatingPointError(f"environment returned a non-finite reward: {reward}")
    return StepResult(
        next_observation=next_obs,
        reset_observation=reset_obs,
        reward=reward,
        terminated=np.asarray(terminated, dtype=np.float32),  # (E,)
        truncated=np.asarray(truncated, dtype=np.float32),  # (E,)
        info=info,
    )


def evaluate(
    act: Callable[[np.ndarray], np.ndarray], envs: gym.vector.VectorEnv, num_episodes: int
) -> dict[str, float]:
    """Deterministic evaluation as upstream ``evaluate`` (docs/flashsac.md).

    ``num_episodes / num_envs`` rounds; each resets the vector env, acts until every sub-env has finished once, and
    accumulates returns only until each sub-env's first done. The env is reset afterwards, as upstream does.

    Args:
        act: maps (E, O) float32 observations to (E, A) actions; should be deterministic (tanh of the mean).
        envs: the evaluation vector env (reset once with its seed beforehand).
        num_episodes: a multiple of ``envs.num_envs``.

    Returns:
        ``avg_return``, ``avg_length``, ``avg_success_once``, ``avg_success_end`` (raw env returns).
    """
    num_envs = envs.num_envs
    returns: list[float] = []
    lengths: list[float] = []
    success_once: list[float] = []
    success_end: list[float] = []
    for _ in range(max(1, num_episodes // num_envs) if num_episodes > 0 else 0):
        obs, _ = envs.reset()
        ret = np.zeros(num_envs, dtype=np.float64)  # (E,)
        length = np.zeros(num_envs, dtype=np.int64)  # (E,)
        done_once = np.zeros(num_envs, dtype=bool)  # (E,)
        succ_once = np.zeros(num_envs, dtype=bool)  # (E,)
        succ_end = np.zeros(num_envs, dtype=bool)  # (E,)
        while not done_once.all():
            action = act(np.asarray(obs, dtype=np.float32))  # (E, A)
            obs, reward, terminated, truncated, info = envs.step(action)
            alive = ~done_once  # (E,)
            ret += np.where(alive, reward, 0.0)
            length += alive
            success = np.asarray(info.get("success", np.zeros(num_envs)), dtype=bool)  # (E,)
            succ_once |= alive & success
            done = np.logical_or(terminated, truncated)  # (E,)
            succ_end = np.where(alive & done, success, succ_end)
            done_once |= done
        returns.extend(ret.tolist())
        lengths.extend(length.tolist())
        success_once.extend(succ_once.astype(float).tolist())
        success_end.extend(succ_end.astype(float).tolist())
    if returns:
        envs.reset()
    return {
        "avg_return": float(np.mean(returns)) if returns else float("nan"),
        "avg_length": float(np.mean(lengths)) if lengths else float("nan"),
        "avg_success_once": float(np.mean(success_once)) if success_once else float("nan"),
        "avg_success_end": float(np.mean(success_end)) if success_end else float("nan"),
    }
