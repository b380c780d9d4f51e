"""Uniform n-step replay buffer in numpy with upstream's truncation handling (docs/flashsac.md)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BATCH_KEYS", "UPDATE_KEYS", "ReplayBuffer", "flat_batch", "flat_widths"]

BATCH_KEYS: tuple[str, ...] = ("observation", "action", "reward", "terminated", "truncated", "next_observation")
"""Keys of a sampled batch, all float32: (B, O), (B, A), (B,), (B,), (B,), (B, O)."""

UPDATE_KEYS: tuple[str, ...] = ("observation", "action", "reward", "terminated", "next_observation")
"""The batch entries an update reads (truncated transitions bootstrap, so ``truncated`` is not one of them)."""


def flat_widths(observation_dim: int, action_dim: int) -> list[int]:
    """Column widths of ``flat_batch``'s entries, in ``UPDATE_KEYS`` order: [O, A, 1, 1, O]."""
    return [observation_dim, action_dim, 1, 1, observation_dim]


def flat_batch(batch: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """The ``UPDATE_KEYS`` entries of a sampled batch side by side, as one (B, 2O + A + 2) float32 array.

    The agents move a batch to the device in one copy of this array and split it there.

    Args:
        batch: a sampled batch (``BATCH_KEYS``).
        out: optional (B, 2O + A + 2) float32 array to write into (e.g. a pinned host buffer).
    """
    num_rows = len(batch["reward"])
    arrays = [np.asarray(batch[k], dtype=np.float32).reshape(num_rows, -1) for k in UPDATE_KEYS]
    return np.concatenate(arrays, axis=1, out=out)


class ReplayBuffer:
    """Paper-era uniform buffer (stores ``next_observation``), fed one vector-env step at a time.

    n-step: the last n vector transitions are kept in a window; each ``add`` stores the transition that starts at
    the oldest step of the window, with reward Σ_{k<n} γᵏ r_{t+k} cut at the first done (terminated or
    truncated) in the window, whose flags and next observation are carried. γⁿ is applied by the agent (the
    small truncation bias of upstream is kept). The n−1 newest in-flight steps are not stored until later adds.

    Sampling is uniform with replacement over the stored rows, from a private seeded ``numpy.random.Generator``.

    Args:
        observation_dim: O.
        action_dim: A.
        max_length: capacity M (rows; one row per env per step).
        min_length: sampling is allowed once ``len(self) >= min_length``.
        n_step: n.
        gamma: γ for the n-step reward.
        seed: sampler seed (or seed sequence entropy).
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        max_length: int,
        min_length: int,
        n_step: int,
        gamma: float,
        seed: int | Sequence[int],
    ) -> None:
        self.max_length = max_length
        self.min_length = min_length
        self.n_step = n_step
        self.gamma = gamma
        self.observation = np.zeros((max_length, observation_dim), dtype=np.float32)  # (M, O)
        self.action = np.zeros((max_length, action_dim), dtype=np.float32)  # (M, A)
        self.reward = np.zeros((max_length,), dtype=np.float32)  # (M,)
        self.terminated = np.zeros((max_length,), dtype=np.float32)  # (M,)
        self.truncated = np.zeros((max_length,), dtype=np.float32)  # (M,)
        self.next_observation = np.zeros((max_length, observation_dim), dtype=np.float32)  # (M, O)
        self.size = 0
        self.index = 0
        self.window: collections.deque[dict[str, np.ndarray]] = collections.deque(maxlen=n_step)
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def __len__(self) -> int:
        return self.size

    def can_sample(self) -> bool:
        """True once at least ``min_length`` rows are stored."""
        return self.size >= self.min_length

    def add(
        self,
        observation: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        next_observation: np.ndarray,
    ) -> None:
        """Adds one vector-env step (E envs).

        Args:
            observation: (E, O) observation the action was taken in.
            action: (E, A) action.
            reward: (E,) raw reward.
            terminated: (E,) 0/1.
            truncated: (E,) 0/1.
            next_observation: (E, O) true successor (``final_obs`` on episode end).

        Raises:
            FloatingPointError: a non-finite value, so NaNs never enter the buffer silently.
        """
        step = {
            "observation": np.array(observation, dtype=np.float32),  # (E, O)
            "action": np.array(action, dtype=np.float32),  # (E, A)
            "reward": np.asarray(reward, dtype=np.float32),  # (E,)
            "terminated": np.asarray(terminated, dtype=np.float32),  # (E,)
            "truncated": np.asarray(truncated, dtype=np.float32),  # (E,)
            "next_observation": np.array(next_observation, dtype=np.float32),  # (E, O)
        }
        for key, value in step.items():
            if not np.isfinite(value).all():
                raise FloatingPointError(f"non-finite {key} passed to the replay buffer: {value}")
        self.window.append(step)
        if len(self.window) < self.n_step:
            return
        self._store(self._n_step_transition())

    def _n_step_transition(self) -> dict[str, np.ndarray]:
        first = self.window[0]
        num_envs = first["reward"].shape[0]
        reward = np.zeros(num_envs, dtype=np.float32)  # (E,)
        terminated = np.zeros(num_envs, dtype=np.float32)  # (E,)
        truncated = np.zeros(num_envs, dtype=np.float32)  # (E,)
        next_observation = np.zeros_like(first["next_observation"])  # (E, O)
        alive = np.ones(num_envs, dtype=bool)  # (E,) no done yet in the window
        for k, step in enumerate(self.window):
            reward = np.where(alive, reward + np.float32(self.gamma**k) * step["reward"], reward)  # (E,)
            terminated = np.where(alive, step["terminated"], terminated)  # (E,)
            truncated = np.where(alive, step["truncated"], truncated)  # (E,)
            next_observation = np.where(alive[:, None], step["next_observation"], next_observation)  # (E, O)
            alive &= ~((step["terminated"] > 0) | (step["truncated"] > 0))
        return {
            "observation": first["observation"],
            "action": first["action"],
            "reward": reward.astype(np.float32),
            "terminated": terminated,
            "truncated": truncated,
            "next_observation": next_observation,
        }

    def _store(self, transition: dict[str, np.ndarray]) -> None:
        num_rows = transition["reward"].shape[0]
        rows = (self.index + np.arange(num_rows)) % self.max_length  # (E,)
        for key in BATCH_KEYS:
            getattr(self, key)[rows] = transition[key]
        self.index = int((self.index + num_rows) % self.max_length)
        self.size = min(self.size + num_rows, self.max_length)

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        """Uniform sample with replacement.

        Args:
            batch_size: B.

        Returns:
            dict with ``BATCH_KEYS``: observation (B, O), action (B, A), reward (B,) raw n-step reward,
            terminated (B,), truncated (B,), next_observation (B, O); all float32 copies.
        """
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)  # (B,)
        return {key: getattr(self, key)[idx] for key in BATCH_KEYS}

    def state_dict(self, include_data: bool = True) -> dict[str, Any]:
        """Counters, sampler RNG, the in-flight n-step window and (optionally) the stored rows."""
        state: dict[str, Any] = {
            "size": self.size,
            "index": self.index,
            "rng": self.rng.bit_generator.state,
            "window": [dict(step) for step in self.window],
        }
        if include_data:
            for key in BATCH_KEYS:
                state[key] = getattr(self, key)[: self.size].copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output; without stored rows only the sampler RNG is restored and the buffer
        stays empty (the loop then collects ``min_length`` fresh random steps, as upstream)."""
        self.rng.bit_generator.state = state["rng"]
        if "observation" not in state:
            return
        size = int(state["size"])
        if size > self.max_length:
            raise ValueError(f"saved buffer has {size} rows > max_length {self.max_length}")
        for key in BATCH_KEYS:
            getattr(self, key)[:size] = state[key]
        self.size = size
        self.index = int(state["index"])
        self.window.clear()
        for step in state["window"]:
            self.window.append(dict(step))
