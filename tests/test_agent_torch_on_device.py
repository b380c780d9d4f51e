"""agent_torch/on_device.py: the device counterparts of the loop's reward normaliser, zeta noise and replay ring
(what the torch agent uses on MJX environments) against the host pieces, on CPU tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_common.buffer import ROW_KEYS, flat_batch
from agent_common.normalizer import RewardNormalizer
from agent_torch.on_device import DeviceReplay, DeviceRewardNormalizer, DeviceZetaNoise, torch_generator
from agent_torch.replay import TensorRowStorage
from tests.agent_test_utils import ACT_DIM, NUM_ENVS, OBS_DIM, random_transition, replay_buffer

CPU = torch.device("cpu")
WIDTH = 2 * OBS_DIM + ACT_DIM + 3


@pytest.mark.parametrize("enabled", [True, False])
def test_reward_normalizer_matches_the_host_one(enabled):
    rng = np.random.default_rng(0)
    host = RewardNormalizer(0.99, 5.0, enabled=enabled)
    device = DeviceRewardNormalizer(0.99, 5.0, enabled, NUM_ENVS, CPU)
    for _ in range(300):
        _, _, reward, terminated, truncated, _ = random_transition(rng)
        reward = 3.0 * reward + 1.0
        host.update(reward, terminated, truncated)
        device.update(*(torch.from_numpy(x) for x in (reward, terminated, truncated)))
    got, want = device.state_dict(), host.state_dict()
    np.testing.assert_allclose(got["G"], want["G"], rtol=1e-12, atol=0)
    for key in ("G_max", "mean", "var", "count"):
        assert got[key] == pytest.approx(want[key], rel=1e-12), key
    expected = np.float32(host.scale()) if enabled else np.float32(1.0)
    assert float(device.scale()) == pytest.approx(float(expected), rel=1e-6)
    rewards = np.linspace(-3, 3, 7, dtype=np.float32)
    np.testing.assert_allclose((torch.from_numpy(rewards) / device.scale()).numpy(), host.normalize(rewards),
                               rtol=1e-6)
    fresh = DeviceRewardNormalizer(0.99, 5.0, enabled, NUM_ENVS, CPU)
    fresh.load_state_dict(host.state_dict())  # the host layout loads
    assert float(fresh.scale()) == float(device.scale()) or not enabled
    fresh.load_state_dict(RewardNormalizer(0.99, 5.0).state_dict())  # a fresh host G is (1,)
    assert fresh.G.shape == (NUM_ENVS,) and float(fresh.G.abs().sum()) == 0.0


def test_zeta_noise_holds_eps_for_drawn_lengths_and_resumes_exactly():
    noise = DeviceZetaNoise(NUM_ENVS, ACT_DIM, 2.0, 4, torch_generator(CPU, 0, 1))
    samples = [noise.sample().clone() for _ in range(200)]
    runs, length = [], 1
    for prev, cur in zip(samples, samples[1:], strict=False):
        if torch.equal(prev, cur):
            length += 1
        else:
            runs.append(length)
            length = 1
    assert max(runs) <= 4 and min(runs) >= 1 and len(set(runs)) > 1  # held for 1..k_max steps, lengths vary
    state = noise.state_dict()
    ahead = [noise.sample().clone() for _ in range(20)]
    other = DeviceZetaNoise(NUM_ENVS, ACT_DIM, 2.0, 4, torch_generator(CPU, 5, 1))
    other.load_state_dict(state)
    for want in ahead:
        assert torch.equal(other.sample(), want)


def test_replay_rows_match_the_host_buffer_through_ring_wraps():
    rng = np.random.default_rng(1)
    capacity = 7  # not a multiple of NUM_ENVS: writes wrap mid-step
    host = replay_buffer(capacity)
    device = DeviceReplay(TensorRowStorage(capacity, WIDTH, OBS_DIM, CPU, 0), OBS_DIM, ACT_DIM, min_length=4)
    for step in range(9):
        transition = random_transition(rng)
        host.add(*transition)
        device.add(*(torch.from_numpy(x) for x in transition))
        assert (len(device), device.index, device.can_sample()) == (len(host), host.index, len(host) >= 4), step
    want = flat_batch({k: getattr(host, k) for k in ROW_KEYS}, keys=ROW_KEYS)
    np.testing.assert_array_equal(device.rows(), want)
    state, rows = device.state_dict(), device.rows()
    batch = device.sample(5, torch.tensor(2.0))
    again = DeviceReplay(TensorRowStorage(capacity, WIDTH, OBS_DIM, CPU, 9), OBS_DIM, ACT_DIM, min_length=4)
    again.load_state_dict(state)
    again.load_rows(rows)
    assert torch.equal(again.sample(5, torch.tensor(2.0)), batch)  # rows and sampler generator restored
    for row in batch.numpy():  # each sampled row is a stored one, its reward divided by the scale
        stored = rows[(rows[:, :OBS_DIM] == row[:OBS_DIM]).all(axis=1)][0]
        assert row[OBS_DIM + ACT_DIM] == np.float32(stored[OBS_DIM + ACT_DIM] / np.float32(2.0))
    again.load_rows(None)
    assert (len(again), again.index, again.can_sample()) == (0, 0, False)
    with pytest.raises(ValueError, match="replay rows: the loop state records 7 rows, the buffer holds 3"):
        again.load_state_dict(state)
        again.load_rows(rows[:3])


def test_replay_flags_non_finite_rows_at_the_next_read():
    device = DeviceReplay(TensorRowStorage(8, WIDTH, OBS_DIM, CPU, 0), OBS_DIM, ACT_DIM, min_length=1)
    transition = [torch.from_numpy(x) for x in random_transition(np.random.default_rng(2))]
    device.add(*transition)
    device.check_finite()
    transition[2] = transition[2].clone()
    transition[2][0] = float("nan")
    device.add(*transition)
    with pytest.raises(FloatingPointError, match="non-finite values were added to the replay buffer"):
        device.check_finite()


def test_sample_divides_by_a_device_scalar_as_by_a_float():
    storage = TensorRowStorage(8, WIDTH, OBS_DIM, CPU, 0)
    storage.write(0, np.random.default_rng(3).standard_normal((8, WIDTH)).astype(np.float32))
    state = storage.state_dict()
    by_float = storage.sample(6, 1.7)
    storage.load_state_dict(state)
    assert torch.equal(storage.sample(6, torch.tensor(1.7, dtype=torch.float32)), by_float)
