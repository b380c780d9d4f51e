"""mjlab tasks (MuJoCo Warp, torch-native) as a vector env of the torch agent's device loop (``env.env_type=mjlab``).

mjlab's ``ManagerBasedRlEnv`` steps ``num_envs`` copies of a task on a torch device (MuJoCo Warp on the GPU, or on
the CPU with ``device="cpu"``) and returns torch tensors, so the torch agent reads them in place: no copy between
frameworks. ``MjlabVecEnv`` gives it the interface of ``agent_torch.vector.TorchVectorEnv``, as upstream FlashSAC's
mjlab wrapper builds it:

* the observation is the ``critic`` group when the task has one (mjlab's privileged, noise-free observation), else
  the ``actor`` group, flattened to (E, O) float32;
* actions in [-1, 1] pass through unchanged (mjlab's action terms scale them);
* mjlab's automatic reset is off: ``step`` returns the true terminal observation of every finished env
  (``final_obs``) and resets those envs, whose first observation becomes ``obs``; ``terminated`` is the task's own
  end, ``truncated`` its time limit (mjlab's ``time_outs``).

mjlab is imported when an env is built (the ``mjlab`` extra). Its first run on a machine compiles MuJoCo Warp's
kernels (about a minute on the CPU; Warp caches them in its kernel cache directory for later runs).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from simulators import mjlab as declared  # this simulator's declarations (the name mjlab is mjlab's)

__all__ = ["MjlabStep", "MjlabVecEnv", "make_env", "observation_group"]


class MjlabStep(NamedTuple):
    """One step of every env: (E, O) ``obs`` (the reset observation where an episode ended), (E,) float32 ``reward``,
    ``terminated`` and ``truncated`` in {0, 1}, (E, O) ``final_obs`` (the true successor of every env)."""

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor


def observation_group(groups: list[str]) -> str:
    """The observation group the agent sees: ``critic`` when the task has one, else ``actor`` (upstream's choice).

    Raises:
        ValueError: neither group exists (the message lists the task's groups).
    """
    if "critic" in groups:
        return "critic"
    if "actor" in groups:
        return "actor"
    raise ValueError(f"mjlab task: expected an 'actor' or 'critic' observation group, got {groups}")


class MjlabVecEnv:
    """``num_envs`` copies of an mjlab task stepped from torch (see the module doc).

    Args:
        task: one of ``simulators.mjlab.TASKS``.
        num_envs: E.
        seed: mjlab's seed (it seeds Python's, numpy's, Warp's and torch's global generators when the env is built).
        sim_device: the torch device mjlab simulates on (``cpu``, ``cuda``, ``cuda:N``).
        device: the device of the tensors ``step`` returns and of the actions it takes (the agent's); when it is not
            ``sim_device`` the tensors are copied between the two.
        max_episode_steps: a positive value replaces the task's episode length (in env steps); None or <= 0 keeps
            it.

    Raises:
        ImportError: mjlab is not installed (the message has the install line).
        ValueError: an unknown task, or a task whose observation group is not a flat vector.
    """

    exact_state = False
    """``state_dict`` holds no simulator state: a resumed run starts new episodes (see ``load_state_dict``)."""

    def __init__(self, task: str, num_envs: int, seed: int, sim_device: str | torch.device, device: torch.device,
                 max_episode_steps: int | None = None) -> None:
        if task not in declared.TASKS:
            raise ValueError(f"task: expected one of {', '.join(declared.TASKS)}, got {task!r}")
        missing = declared.missing()
        if missing:
            raise ImportError("env.env_type=mjlab needs the mjlab extra (pip install -c constraints/ci.txt -e "
                              f"\".[mjlab]\"); not installed: {', '.join(missing)}")
        import mjlab.tasks  # noqa: F401  (registers the tasks)
        from mjlab.envs.manager_based_rl_env import ManagerBasedRlEnv
        from mjlab.tasks.registry import load_env_cfg

        cfg = load_env_cfg(task)
        cfg.scene.num_envs = int(num_envs)
        cfg.seed = int(seed)
        cfg.auto_reset = False  # step returns the terminal observation; finished envs are reset here
        step_dt = cfg.sim.mujoco.timestep * cfg.decimation
        if max_episode_steps is not None and max_episode_steps > 0:
            cfg.episode_length_s = (int(max_episode_steps) - 0.5) * step_dt  # ceil(length / step_dt) = the steps
        self.task = task
        self.device = torch.device(device)
        self.sim_device = torch.device(sim_device)
        self._env = ManagerBasedRlEnv(cfg=cfg, device=str(self.sim_device))
        spaces = self._env.single_observation_space.spaces
        self.group = observation_group(list(spaces))
        shape = getattr(spaces[self.group], "shape", None)
        if shape is None:
            raise ValueError(f"task {task}: its {self.group!r} observation group is a dict of terms, not one vector "
                             "(concatenate_terms=False); the agent takes one flat observation")
        self.num_envs = int(num_envs)
        self.observation_size = int(np.prod(shape))
        self.action_size = int(self._env.single_action_space.shape[0])
        self.action_low = np.full(self.action_size, -1.0, dtype=np.float32)  # (A,)
        self.action_high = np.full(self.action_size, 1.0, dtype=np.float32)  # (A,)
        self.max_episode_steps = int(math.ceil(cfg.episode_length_s / step_dt))
        self.jax_device = f"mjlab ({self.sim_device})"  # how the envs step, for the trainer's compute-path line
        obs, _ = self._env.reset()
        self._obs = self._flat(obs)

    def _flat(self, obs: dict[str, Any]) -> torch.Tensor:
        """(E, O) float32 copy of the agent's observation group on ``device`` (mjlab may update its buffers in
        place)."""
        value = obs[self.group].reshape(self.num_envs, -1)
        return value.to(device=self.device, dtype=torch.float32, copy=True)

    def observation(self) -> torch.Tensor:
        """(E, O) float32 current observation."""
        return self._obs

    def reset(self) -> torch.Tensor:
        """Fresh episodes in every env (mjlab's random initial states); returns the observation."""
        obs, _ = self._env.reset()
        self._obs = self._flat(obs)
        return self._obs

    def step(self, action: torch.Tensor) -> MjlabStep:
        """One step of every env on (E, A) actions in [-1, 1]; finished envs are reset (one device read: which)."""
        obs, reward, terminated, truncated, _ = self._env.step(action.to(self.sim_device))
        final_obs = self._flat(obs)  # (E, O) the true successors
        done = terminated | truncated  # (E,) bool
        done_ids = done.nonzero(as_tuple=False).squeeze(-1)
        if done_ids.numel() > 0:
            obs, _ = self._env.reset(env_ids=done_ids)  # recomputes the finished envs' observations only
            self._obs = self._flat(obs)
        else:
            self._obs = final_obs
        f32 = {"device": self.device, "dtype": torch.float32}
        return MjlabStep(obs=self._obs, reward=reward.to(**f32, copy=True), terminated=terminated.to(**f32),
                         truncated=truncated.to(**f32), final_obs=final_obs)

    def compile_step(self) -> None:
        """Nothing: MuJoCo Warp compiles its kernels when the env is built."""

    def block_until_ready(self) -> None:
        """Waits for the simulator's pending work on a GPU."""
        if self.sim_device.type == "cuda":
            torch.cuda.synchronize(self.sim_device)

    def state_dict(self) -> dict[str, Any]:
        """What identifies the envs (task, count, observation and action sizes); mjlab's simulator and managers
        (commands, pushes, observation histories) are not saved."""
        return {"simulator": "mjlab", "task": self.task, "num_envs": self.num_envs,
                "observation_size": self.observation_size, "action_size": self.action_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Checks that ``state_dict`` output describes these envs, then starts new episodes in every env (the
        simulator state is not in checkpoints; the trainer says so once).

        Raises:
            ValueError: another simulator, task, env count or size.
        """
        mine = self.state_dict()
        if not isinstance(state, dict) or any(state.get(key) != value for key, value in mine.items()):
            raise ValueError(f"env state: expected the state of {mine}, got {state}")
        self.reset()

    def close(self) -> None:
        self._env.close()


def make_env(cfg: Any, num_envs: int, seed: int, device: Any = None) -> Any:
    """``num_envs`` copies of the config's task seeded with ``seed``, simulated on ``env.device`` (null: ``device``,
    the agent's torch device) and returning tensors on ``device``.

    Raises:
        ValueError: ``env.device`` names CUDA and torch sees none (the config error's line).
    """
    sim_device = torch.device(cfg.env.device) if cfg.env.device is not None else device
    if sim_device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"invalid value {cfg.env.device!r} for 'env.device': torch sees no CUDA device here "
                         "(use cpu, or null for the agent's device)")
    return MjlabVecEnv(cfg.env.env_name, int(num_envs), int(seed), sim_device, device, cfg.env.max_episode_steps)
