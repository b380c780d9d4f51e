"""Uniform n-step replay buffer in numpy with upstream's truncation handling (docs/flashsac.md)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["BATCH_KEYS", "ROW_KEYS", "UPDATE_KEYS", "ReplayBuffer", "RowStorage", "flat_batch", "flat_widths",
           "split_rows"]

BATCH_KEYS: tuple[str, ...] = ("observation", "action", "reward", "terminated", "truncated", "next_observation")
"""Keys of a sampled batch, all float32: (B, O), (B, A), (B,), (B,), (B,), (B, O)."""

UPDATE_KEYS: tuple[str, ...] = ("observation", "action", "reward", "terminated", "next_observation")
"""The batch entries an update reads (truncated transitions bootstrap, so ``truncated`` is not one of them)."""

ROW_KEYS: tuple[str, ...] = (*UPDATE_KEYS, "truncated")
"""Column order of a stored row in a ``RowStorage`` (device buffers): the update's columns first, so the first
2O + A + 2 columns of sampled rows are a ``flat_batch``."""


def flat_widths(observation_dim: int, action_dim: int) -> list[int]:
    """Column widths of ``flat_batch``'s entries, in ``UPDATE_KEYS`` order: [O, A, 1, 1, O]."""
    return [observation_dim, action_dim, 1, 1, observation_dim]


def flat_batch(batch: dict[str, np.ndarray], out: np.ndarray | None = None,
               keys: tuple[str, ...] = UPDATE_KEYS) -> np.ndarray:
    """The ``keys`` entries of a sampled batch side by side, as one (B, 2O + A + 2) float32 array (``UPDATE_KEYS``;
    ``ROW_KEYS`` adds the ``truncated`` column: a stored row of a device buffer).

    The agents move a batch to the device in one copy of this array and split it there.

    Args:
        batch: a sampled batch (``BATCH_KEYS``).
        out: optional float32 array of the result's shape to write into (e.g. a pinned host buffer).
        keys: the entries, in column order.
    """
    num_rows = len(batch["reward"])
    arrays = [np.asarray(batch[k], dtype=np.float32).reshape(num_rows, -1) for k in keys]
    return np.concatenate(arrays, axis=1, out=out)


def split_rows(rows: np.ndarray, observation_dim: int) -> dict[str, np.ndarray]:
    """Inverse of ``flat_batch(..., keys=ROW_KEYS)``: (R, 2O + A + 3) rows -> ``BATCH_KEYS`` float32 arrays."""
    action_dim = rows.shape[1] - 2 * observation_dim - 3
    bounds = np.cumsum([*flat_widths(observation_dim, action_dim), 1])[:-1]
    parts = dict(zip(ROW_KEYS, np.split(np.asarray(rows, dtype=np.float32), bounds, axis=1), strict=True))
    for key in ("reward", "terminated", "truncated"):
        parts[key] = parts[key][:, 0]
    return {key: np.ascontiguousarray(parts[key]) for key in BATCH_KEYS}


class RowStorage(Protocol):
    """Where a ``ReplayBuffer`` keeps its rows when they do not live in its own numpy arrays (an agent's device
    buffer, ``agent_jax.replay`` / ``agent_torch.replay``). The buffer keeps the n-step window, the counters and the
    ring index on the host, so the loop knows without asking the device when sampling may start; the storage
    holds the rows and samples them itself (``ReplayBuffer.sample`` is then unavailable).
    """

    def write(self, index: int, rows: np.ndarray) -> None:
        """Stores (E, 2O + A + 3) float32 rows (``ROW_KEYS`` columns) at ring positions index, index + 1, ...
        (mod capacity)."""
        ...

    def read(self, size: int) -> np.ndarray:
        """The first ``size`` stored rows as a (size, 2O + A + 3) float32 numpy array (for checkpoints)."""
        ...

    def load(self, rows: np.ndarray, index: int) -> None:
        """Replaces the contents by ``rows`` (positions 0 .. len(rows) - 1) with the ring index at ``index``."""
        ...


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
        storage: keep the rows there instead of in host numpy arrays (see ``RowStorage``); the checkpoint format
            (``state_dict``) is the same either way.
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
        storage: RowStorage | None = None,
    ) -> None:
        self.max_length = max_length
        self.observation_dim = observation_dim
        self.storage = storage
        self.min_length = min_length
        self.n_step = n_step
        self.gamma = gamma
        rows = 0 if storage is not None else max_length  # no host copy of rows that live in a storage
        self.observation = np.zeros((rows, observation_dim), dtype=np.float32)  # (M, O)
        self.action = np.zeros((rows, action_dim), dtype=np.float32)  # (M, A)
        self.reward = np.zeros((rows,), dtype=np.float32)  # (M,)
        self.terminated = np.zeros((rows,), dtype=np.float32)  # (M,)
        self.truncated = np.zeros((rows,), dtype=np.float32)  # (M,)
        self.next_observation = np.zeros((rows, observation_dim), dtype=np.float32)  # (M, O)
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
        if self.storage is not None:
            self.storage.write(self.index, flat_batch(transition, keys=ROW_KEYS))  # (E, 2O + A + 3)
        else:
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
        if self.storage is not None:
            raise RuntimeError("the rows of this replay buffer live in the agent's storage, which samples them")
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
            if self.storage is not None:
                state.update(split_rows(self.storage.read(self.size), self.observation_dim))
            else:
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
        if self.storage is not None:
            self.storage.load(flat_batch({k: state[k] for k in BATCH_KEYS}, keys=ROW_KEYS), int(state["index"]))
        else:
            for key in BATCH_KEYS:
                getattr(self, key)[:size] = state[key]
        self.size = size
        self.index = int(state["index"])
        self.window.clear()
        for step in state["window"]:
            self.window.append(dict(step))
