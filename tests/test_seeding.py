"""The run seed's RNG streams (``agent_common.seeding``): one numbering and one 63-bit seed derivation for the loop,
the torch agent's device pieces and the JAX agent's keys. The values are the ones the torch generators were seeded
with before the streams were defined in one place, so runs and checkpoints keep their draws."""

from __future__ import annotations

import numpy as np

from agent_common.seeding import BUFFER_STREAM, NOISE_STREAM, WARMUP_STREAM, stream_seed


def test_stream_numbers_are_distinct_and_stable():
    assert (NOISE_STREAM, BUFFER_STREAM, WARMUP_STREAM) == (1, 2, 3)


def test_stream_seed_values_and_range():
    assert stream_seed(0, BUFFER_STREAM) == 6745496414556587486
    assert stream_seed(12345, BUFFER_STREAM) == 7135883775792861182
    assert (stream_seed(7, NOISE_STREAM), stream_seed(7, WARMUP_STREAM)) == (793649810351256391, 7443599362348754078)
    seeds = {stream_seed(s, k) for s in range(20) for k in (1, 2, 3)}
    assert len(seeds) == 60 and all(0 <= v < 2**63 for v in seeds)
    state = np.random.SeedSequence([7, 1]).generate_state(2, dtype=np.uint32)
    assert stream_seed(7, 1) == (int(state[0]) << 31 | int(state[1]) >> 1) & (2**63 - 1)


def test_torch_pieces_use_the_shared_derivation():
    from agent_torch.on_device import stream_seed as torch_stream_seed
    from agent_torch.replay import sampler_seed

    assert torch_stream_seed is stream_seed
    assert sampler_seed(12345) == stream_seed(12345, BUFFER_STREAM)
