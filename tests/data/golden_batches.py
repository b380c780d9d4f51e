"""Seeded replay batches the golden-output scripts of this folder feed the agents' updates."""

from __future__ import annotations

import numpy as np


def seeded_batches(seed: int, count: int, batch: int, obs_dim: int, act_dim: int,
                   terminated_rows: int) -> list[dict[str, np.ndarray]]:
    """``count`` float32 replay batches of ``batch`` rows from ``np.random.default_rng(seed)``; the first
    ``terminated_rows`` rows of each are terminated."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        terminated = np.zeros(batch, np.float32)
        terminated[:terminated_rows] = 1.0
        batches.append({
            "observation": rng.normal(size=(batch, obs_dim)).astype(np.float32),
            "action": rng.uniform(-1, 1, (batch, act_dim)).astype(np.float32),
            "reward": (0.5 * rng.normal(size=batch)).astype(np.float32),
            "terminated": terminated,
            "next_observation": rng.normal(size=(batch, obs_dim)).astype(np.float32),
        })
    return batches
