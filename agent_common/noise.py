"""Truncated-zeta noise repetition for exploration (docs/flashsac.md), in numpy with a seeded Generator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ZetaNoise", "truncated_zeta_cdf"]


def truncated_zeta_cdf(mu: float, k_max: int) -> np.ndarray:
    """CDF of P(k) ∝ k^-mu on k = 1..k_max.

    Args:
        mu: zeta exponent (2.0 upstream).
        k_max: largest repetition length (16 upstream).

    Returns:
        (k_max,) float64 CDF whose last entry is 1.
    """
    k = np.arange(1, k_max + 1, dtype=np.float64)  # (K,)
    pmf = k ** (-mu)  # (K,)
    cdf = np.cumsum(pmf / pmf.sum())  # (K,)
    cdf[-1] = 1.0
    return cdf


class ZetaNoise:
    """Gaussian exploration noise held for k ~ TruncZeta(mu, k_max) steps, shared by all envs.

    Each ``sample()`` draws a fresh ε ~ N(0, I) of shape (E, A) *and* a fresh length n (so the RNG advances every
    step); if ``count == 0`` or ``count >= n`` the held ε and n are replaced and ``count`` resets. The returned ε
    is then used as ``tanh(μ + σ·ε)`` by the agent. The state is global across envs and never reset at episode
    boundaries, as upstream.

    Args:
        num_envs: E.
        action_dim: A.
        mu: zeta exponent.
        k_max: maximum repetition length.
        seed: seed (or seed sequence entropy) of the private ``numpy.random.Generator`` (PCG64).
    """

    def __init__(self, num_envs: int, action_dim: int, mu: float, k_max: int, seed: int | Sequence[int]) -> None:
        self.num_envs = num_envs
        self.action_dim = action_dim
        self.cdf = truncated_zeta_cdf(mu, k_max)  # (K,)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.eps = self.rng.standard_normal((num_envs, action_dim)).astype(np.float32)  # (E, A)
        self.count = 0
        self.repeat = 1

    def sample(self) -> np.ndarray:
        """Advances one env step and returns the (E, A) float32 noise to use for it."""
        new_eps = self.rng.standard_normal((self.num_envs, self.action_dim)).astype(np.float32)  # (E, A)
        u = self.rng.random()
        new_repeat = 1 + int(np.argmax(u < self.cdf))
        if self.count == 0 or self.count >= self.repeat:
            self.eps = new_eps
            self.repeat = new_repeat
            self.count = 0
        self.count += 1
        return self.eps.copy()

    def state_dict(self) -> dict[str, Any]:
        """Picklable state: held ε, counter, repeat length and the generator state."""
        return {"eps": self.eps.copy(), "count": self.count, "repeat": self.repeat, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output."""
        self.eps = np.asarray(state["eps"], dtype=np.float32).copy()
        self.count = int(state["count"])
        self.repeat = int(state["repeat"])
        self.rng.bit_generator.state = state["rng"]
