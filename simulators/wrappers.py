"""gymnasium wrappers the host simulators share."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["Float32Observation"]


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
