"""Observation / action spaces and replay batches for agents built without an environment (numpy only).

Used by the parity harness, its tests and the GPU benchmarks that time an update on HalfCheetah-shaped inputs.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

__all__ = ["make_batch", "make_spaces"]


def make_spaces(observation_dim: int, action_dim: int, action_low: Any = None,
                action_high: Any = None) -> tuple[Any, Any]:
    """Box observation / action spaces ([-1, 1] actions unless ``action_low`` / ``action_high`` (A,) are given); a
    SimpleNamespace stand-in where gymnasium is missing."""
    low_o, high_o = np.full(observation_dim, -np.inf, np.float32), np.full(observation_dim, np.inf, np.float32)
    low_a = -np.ones(action_dim, np.float32) if action_low is None else np.asarray(action_low, np.float32)
    high_a = np.ones(action_dim, np.float32) if action_high is None else np.asarray(action_high, np.float32)
    try:
        import gymnasium as gym

        return gym.spaces.Box(low_o, high_o, dtype=np.float32), gym.spaces.Box(low_a, high_a, dtype=np.float32)
    except (ImportError, AttributeError):  # no gymnasium (or the GPU benchmark's import stub)
        box = types.SimpleNamespace
        return (box(shape=(observation_dim,), low=low_o, high=high_o, dtype=np.float32),
                box(shape=(action_dim,), low=low_a, high=high_a, dtype=np.float32))


def make_batch(rng: np.random.Generator, batch_size: int, observation_dim: int, action_dim: int,
               terminated_fraction: float = 0.1) -> dict[str, np.ndarray]:
    """A synthetic replay batch: N(0, 1) observations, uniform actions, rewards 0.5 N(0, 1) (inside the [-5, 5]
    support, some atoms clipped after the shift), a fraction of terminated rows (the two-hot branch)."""
    terminated = (rng.random(batch_size) < terminated_fraction).astype(np.float32)
    terminated[0] = 1.0  # at least one terminated row in every batch
    return {
        "observation": rng.standard_normal((batch_size, observation_dim)).astype(np.float32),
        "action": rng.uniform(-1.0, 1.0, (batch_size, action_dim)).astype(np.float32),
        "reward": (0.5 * rng.standard_normal(batch_size)).astype(np.float32),
        "terminated": terminated,
        "truncated": np.zeros(batch_size, np.float32),
        "next_observation": rng.standard_normal((batch_size, observation_dim)).astype(np.float32),
    }
