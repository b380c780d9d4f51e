"""The run seed's independent RNG streams (numpy only), shared by both training loops and both agents.

Each stream's generator derives from ``(seed, stream)``: on the host numpy's ``PCG64([seed, stream])``; a torch
generator takes ``stream_seed(seed, stream)`` (63 bits of ``SeedSequence([seed, stream])``); a JAX key is
``jax.random.fold_in(PRNGKey(seed), stream)``. Distinct streams keep the draws uncorrelated.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUFFER_STREAM", "NOISE_STREAM", "WARMUP_STREAM", "stream_seed"]

NOISE_STREAM = 1  # exploration noise (ZetaNoise and its device counterparts)
BUFFER_STREAM = 2  # the replay buffer's sampler
WARMUP_STREAM = 3  # the uniform random actions before the buffer can sample


def stream_seed(seed: int, stream: int) -> int:
    """A 63-bit generator seed for the run seed ``seed`` and the RNG stream ``stream`` (from
    ``SeedSequence([seed, stream])``)."""
    state = np.random.SeedSequence([int(seed), int(stream)]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)
