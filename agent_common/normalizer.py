"""Return-based reward normaliser (docs/flashsac.md), numpy float64 statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RewardNormalizer"]


class RewardNormalizer:
    """Scales rewards by max(√(var_G + 1e-8), G_max / normalized_G_max), G the running discounted return.

    ``update`` is called on every env transition (warm-up included): G ← γ·(1 − done)·G + r with done =
    terminated OR truncated of the *current* step; G_max ← max(G_max, max|G|); and a ``RunningMeanStd`` update of
    G with upstream's quirk (count starts at 0, 1e-4 is added to the old count in M2 only). Stored rewards stay raw;
    ``normalize`` is applied to sampled (n-step) rewards.

    Args:
        gamma: the config γ (not γⁿ).
        normalized_G_max: target bound of |normalised return| (5.0), i.e. the critic support.
        enabled: if False, ``normalize`` is the identity (statistics are still tracked).
    """

    def __init__(self, gamma: float, normalized_G_max: float, enabled: bool = True) -> None:
        self.gamma = float(gamma)
        self.normalized_G_max = float(normalized_G_max)
        self.enabled = enabled
        self.G = np.zeros(1, dtype=np.float64)  # (1,) broadcast lazily to (E,)
        self.G_max = 0.0
        self.mean = 0.0
        self.var = 1.0
        self.count = 0.0

    def update(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Updates G, G_max and the running moments from one vector step.

        Args:
            reward: (E,) raw rewards.
            terminated: (E,) 0/1 flags.
            truncated: (E,) 0/1 flags.
        """
        reward = np.asarray(reward, dtype=np.float64)  # (E,)
        done = np.logical_or(np.asarray(terminated) > 0, np.asarray(truncated) > 0).astype(np.float64)  # (E,)
        self.G = self.gamma * (1.0 - done) * self.G + reward  # (E,)
        self.G_max = max(self.G_max, float(np.max(np.abs(self.G))))
        batch_mean = float(np.mean(self.G))
        batch_var = float(np.var(self.G))
        batch_count = float(self.G.shape[0])
        delta = batch_mean - self.mean
        total = self.count + batch_count
        new_mean = self.mean + delta * batch_count / total
        m2 = self.var * (self.count + 1e-4) + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean = new_mean
        self.var = m2 / total
        self.count = total

    def scale(self) -> float:
        """The current divisor max(√(var + 1e-8), G_max / normalized_G_max)."""
        return max(float(np.sqrt(self.var + 1e-8)), self.G_max / self.normalized_G_max)

    def normalize(self, reward: np.ndarray) -> np.ndarray:
        """Returns r / scale() as float32 (identity when disabled).

        Args:
            reward: (B,) sampled (n-step) rewards.

        Returns:
            (B,) float32 normalised rewards.
        """
        reward = np.asarray(reward, dtype=np.float32)  # (B,)
        if not self.enabled:
            return reward
        return (reward / np.float32(self.scale())).astype(np.float32)  # (B,)

    def state_dict(self) -> dict[str, Any]:
        """G, G_max, mean, var, count."""
        return {"G": self.G.copy(), "G_max": self.G_max, "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output."""
        self.G = np.asarray(state["G"], dtype=np.float64).copy()
        self.G_max = float(state["G_max"])
        self.mean = float(state["mean"])
        self.var = float(state["var"])
        self.count = float(state["count"])
