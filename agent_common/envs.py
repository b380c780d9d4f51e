"""CPU-simulator environments as upstream builds them: RescaleAction, TimeLimit, SameStep-autoreset vector envs.

``env.env_type=mujoco``: gymnasium's MuJoCo tasks. ``env.env_type=dmc``: DeepMind Control suite tasks
(``<domain>-<task>``, ``agent_common.schema.DMC_TASKS``) through shimmy, as upstream's ``make_dmc_env``: the dict
observation flattened and cast to float32, episodes of 1000 steps unless ``max_episode_steps`` says otherwise, no
action repeat. DMC needs the ``dmc`` extra (dm-control, shimmy); it is imported only when a DMC env is built.
``env.env_type=myosuite``: MyoSuite's hand tasks (upstream's names, ``agent_common.schema.MYOSUITE_TASKS``) as
upstream's ``make_myosuite_env``: the registered MyoSuite env with its own episode limit, ``info["success"]`` from
MyoSuite's ``solved``. It needs the ``myosuite`` extra, imported only when a MyoSuite env is built.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.wrappers import RescaleAction, TimeLimit

from agent_common.schema import DMC_EPISODE_STEPS, ENV_TYPES, MYOSUITE_TASKS, dmc_missing, myosuite_missing

__all__ = [
    "EnvSnapshot",
    "StepResult",
    "evaluate",
    "get_env_states",
    "make_env",
    "make_vec_env",
    "mj_model_data",
    "set_env_states",
    "step_env",
]

MYOSUITE_MODEL_FIELDS: tuple[str, ...] = (
    "body_pos", "body_quat", "dof_length", "geom_aabb", "geom_rbound", "geom_size", "site_pos", "site_size",
)
"""The ``MjModel`` arrays MyoSuite's tasks rewrite when an episode starts (targets, the key's and the pen's pose, the
held object's size and what MuJoCo derives from it); a MyoSuite env's snapshot holds them and the bodies' bounding
volumes (the first ``body_bvhnum.sum()`` rows of ``bvh_aabb``; the meshes' own follow and never change)."""

# gymnasium 1.x warns that -v4 ids are out of date; upstream's recipe uses -v4 on purpose (docs/flashsac.md).
warnings.filterwarnings("ignore", message=r".*The environment .* is out of date", category=DeprecationWarning)


class EnvSnapshot(gym.Wrapper):
    """Outermost wrapper that can save and restore the complete env state, for exact resume.

    The state is the MuJoCo integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time, qpos, qvel,
    act, warm-start, controls, ...), the env's random-generator state (gymnasium's ``np_random`` generator; for a
    DMC task its ``RandomState`` and the dm_control environment's step counter), for a MyoSuite task its episode's
    task state and the model arrays its reset rewrites (``MYOSUITE_MODEL_FIELDS``), and every ``TimeLimit``'s
    elapsed-step counter. Exposed as methods so ``VectorEnv.call`` reaches them for sync and async vector envs.
    """

    def __init__(self, env: gym.Env, index: int = 0) -> None:
        super().__init__(env)
        self.index = index  # position in the vector env, so one broadcast call can restore every worker

    def get_snapshot(self) -> dict[str, Any]:
        """Returns a picklable dict with the full env state."""
        base = self.env.unwrapped
        model, data = mj_model_data(base)
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
        mujoco.mj_getState(model, data, state, spec)
        snapshot = {
            "mj_state": state,
            "elapsed_steps": [w._elapsed_steps for w in _time_limits(self.env)],
        }
        dm_env = getattr(base, "_env", None)
        if dm_env is None:
            snapshot["np_random"] = base.np_random.bit_generator.state
        else:  # shimmy over dm_control: the task's legacy RandomState and the environment's own episode counter
            snapshot["np_random"] = base.np_random.get_state()
            snapshot["dm_step"] = [dm_env._step_count, dm_env._reset_next_step]
        if _is_myosuite(base):
            snapshot["myo_task_state"] = copy.deepcopy(base._task_state)
            snapshot["myo_model"] = {name: getattr(model, name).copy() for name in MYOSUITE_MODEL_FIELDS}
            snapshot["myo_model"]["bvh_aabb"] = model.bvh_aabb[: int(model.body_bvhnum.sum())].copy()
        return snapshot

    def set_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Restores a state produced by ``get_snapshot`` (the env must have been reset once)."""
        base = self.env.unwrapped
        model, data = mj_model_data(base)
        dm_env = getattr(base, "_env", None)
        if (dm_env is None) != ("dm_step" not in snapshot):
            raise ValueError("env snapshot does not match the env (a gymnasium MuJoCo snapshot for a DMC env or the "
                             "reverse)")
        if _is_myosuite(base) != ("myo_model" in snapshot):
            raise ValueError("env snapshot does not match the env (a MyoSuite snapshot for another env or the reverse)")
        if "myo_model" in snapshot:  # the episode's model arrays first: mj_forward below reads them
            for name, value in snapshot["myo_model"].items():
                target = getattr(model, name)
                rows = target[: len(value)] if name == "bvh_aabb" else target
                if rows.shape != np.shape(value):
                    raise ValueError(f"env snapshot does not match the env: MjModel.{name} has shape {rows.shape}, "
                                     f"the snapshot's {np.shape(value)}")
                rows[...] = value
            base._task_state = copy.deepcopy(snapshot["myo_task_state"])
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_setState(model, data, np.asarray(snapshot["mj_state"], dtype=np.float64), spec)
        mujoco.mj_forward(model, data)
        if dm_env is None:
            base.np_random.bit_generator.state = snapshot["np_random"]
        else:
            base.np_random.set_state(snapshot["np_random"])
            dm_env._step_count, dm_env._reset_next_step = snapshot["dm_step"]
        limits = _time_limits(self.env)
        if len(limits) != len(snapshot["elapsed_steps"]):
            raise ValueError("env snapshot does not match the wrapper chain (different TimeLimit count)")
        for wrapper, steps in zip(limits, snapshot["elapsed_steps"], strict=True):
            wrapper._elapsed_steps = steps

    def set_snapshots(self, snapshots: list[dict[str, Any]]) -> None:
        """Restores this env's entry of a vector env's list of snapshots."""
        self.set_snapshot(snapshots[self.index])


def _is_myosuite(base: gym.Env) -> bool:
    """Whether ``base`` is a MyoSuite env (its episode's task state lives in ``_task_state``)."""
    return type(base).__module__.startswith("myosuite.")


def mj_model_data(base: gym.Env) -> tuple[Any, Any]:
    """The ``MjModel`` and ``MjData`` of a gymnasium MuJoCo env or of shimmy's dm_control env (its physics)."""
    dm_env = getattr(base, "_env", None)
    if dm_env is not None:
        return dm_env.physics.model.ptr, dm_env.physics.data.ptr
    return base.model, base.data


class Float32Observation(gym.ObservationWrapper):
    """Casts observations to float32 (DMC's come as float64) and declares both spaces float32, as gymnasium's
    MuJoCo tasks do (a float64 action space would make ``RescaleAction`` warn of overflowing casts)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        obs_space, act_space = env.observation_space, env.action_space
        assert isinstance(obs_space, gym.spaces.Box) and isinstance(act_space, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(
            low=obs_space.low.astype(np.float32), high=obs_space.high.astype(np.float32), dtype=np.float32
        )
        self.action_space = gym.spaces.Box(
            low=act_space.low.astype(np.float32), high=act_space.high.astype(np.float32), dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


def _make_dmc(env_name: str, seed: int) -> gym.Env:
    """A DMC suite task through shimmy, as upstream ``make_dmc_env`` (flattened observation), cast to float32."""
    missing = dmc_missing()
    if missing:
        raise ImportError(f"env.env_type=dmc needs the dmc extra (pip install -e \".[dmc]\"); not installed: "
                          f"{', '.join(missing)}")
    from dm_control import suite
    from gymnasium.wrappers import FlattenObservation
    from shimmy import DmControlCompatibilityV0

    domain, task = env_name.split("-")
    env: gym.Env = DmControlCompatibilityV0(suite.load(domain_name=domain, task_name=task,
                                                       task_kwargs={"random": seed}))
    if isinstance(env.observation_space, gym.spaces.Dict):
        env = FlattenObservation(env)
    return Float32Observation(env)


class MyoSuiteSuccess(gym.Wrapper):
    """``info["success"]`` from MyoSuite's ``solved`` (as upstream's wrapper); the info's per-step dicts of
    observations and reward terms (``obs_dict``, ``rwd_dict``) are left out, so a vector env's workers send only
    numbers."""

    def step(self, action: np.ndarray) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {key: value for key, value in info.items() if key not in ("obs_dict", "rwd_dict")}
        info["success"] = bool(np.asarray(info["solved"]).item())
        return obs, reward, terminated, truncated, info


def _make_myosuite(env_name: str) -> gym.Env:
    """A MyoSuite task as upstream ``make_myosuite_env``: the registered env (with its own TimeLimit), success from
    ``solved``, both spaces float32."""
    missing = myosuite_missing()
    if missing:
        raise ImportError(f"env.env_type=myosuite needs the myosuite extra (pip install -e \".[myosuite]\"); not "
                          f"installed: {', '.join(missing)}")
    import myosuite  # noqa: F401  (registers MyoSuite's envs with gymnasium)

    return Float32Observation(MyoSuiteSuccess(gym.make(MYOSUITE_TASKS[env_name])))


def _time_limits(env: gym.Env) -> list[TimeLimit]:
    out = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, TimeLimit):
            out.append(env)
        env = env.env
    return out


def make_env(
    env_name: str,
    seed: int,
    rescale_action: bool = True,
    max_episode_steps: int | None = None,
    index: int = 0,
    env_type: str = "mujoco",
    render_size: int | None = None,
) -> gym.Env:
    """One CPU-simulator env, wrapped as upstream's ``make_mujoco_env`` / ``make_dmc_env`` / ``make_myosuite_env``
    and ``create_vec_env``.

    Args:
        env_name: one of ``ENV_TYPES[env_type]`` (e.g. ``"HalfCheetah-v4"``, ``"cheetah-run"``, ``"myo-reach"``).
        seed: seeds the observation and action spaces (the env itself is seeded by ``reset(seed=...)``); a DMC
            task's random state is also created from it (``task_kwargs={"random": seed}``, as upstream).
        rescale_action: wrap ``RescaleAction`` to [-1, 1] with float32 bounds.
        max_episode_steps: a positive value overrides the task's TimeLimit; ``None`` or <= 0 keeps it (gymnasium:
            the registered limit, 1000; DMC: ``DMC_EPISODE_STEPS`` = 1000, upstream's ``configs/env/dmc.yaml``;
            MyoSuite: the registered limit, 50 to 200 steps).
        index: position of this env in its vector env.
        env_type: ``"mujoco"`` (gymnasium), ``"dmc"`` (dm_control through shimmy) or ``"myosuite"``.
        render_size: build the env with ``render_mode="rgb_array"`` at this width and height (None: no renderer;
            gymnasium tasks only: ``agent_common.video`` films a DMC task with ``mujoco.Renderer``).

    Returns:
        The wrapped env; its outermost wrapper is ``EnvSnapshot``.
    """
    if env_type not in ("mujoco", "dmc", "myosuite"):
        raise ValueError(f"env_type: expected 'mujoco', 'dmc' or 'myosuite' (the CPU simulators), got {env_type!r}")
    if env_name not in ENV_TYPES[env_type]:
        raise ValueError(f"unsupported env {env_name!r} for env_type {env_type!r}; supported: "
                         f"{', '.join(ENV_TYPES[env_type])}")
    if env_type == "dmc":
        if render_size is not None:
            raise ValueError("render_size: a DMC env has no gymnasium render_mode; agent_common.video films it with "
                             "mujoco.Renderer (render_size=None)")
        env = _make_dmc(env_name, seed)
        if max_episode_steps is None or max_episode_steps <= 0:
            max_episode_steps = DMC_EPISODE_STEPS
    elif env_type == "myosuite":
        if render_size is not None:
            raise ValueError("render_size: evaluation videos are recorded for gymnasium tasks (env_type mujoco) only")
        env = _make_myosuite(env_name)
    elif render_size is None:
        env = gym.make(env_name)
    else:
        env = gym.make(env_name, render_mode="rgb_array", width=render_size, height=render_size)
    if rescale_action:
        env = RescaleAction(env, np.float32(-1.0), np.float32(1.0))
    limits = _time_limits(env)
    predefined = limits[0]._max_episode_steps if limits else None
    steps = max_episode_steps if (max_episode_steps is not None and max_episode_steps > 0) else predefined
    if steps is not None:
        env = TimeLimit(env, steps)
    env.observation_space.seed(seed)
    env.action_space.seed(seed)
    return EnvSnapshot(env, index)


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
