"""The torch agent's device replay rows (agent_torch/replay.py, ``agent.buffer_device_type=cuda``) on CPU tensors:
the code path a CUDA run takes, with the agent's device being the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_common.buffer import BATCH_KEYS
from agent_common.config import load_config
from agent_torch.agent import make_agent
from agent_torch.replay import TensorRowStorage
from tests.agent_test_utils import ACT_DIM, ACT_SPACE, NUM_ENVS, OBS_DIM, OBS_SPACE, random_transition, replay_buffer

BATCH = 16
SMALL = ["num_threads=1", "agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
         "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "agent.categorical_target_backend=torch",
         "agent.device_type=cpu", "seed=3"]


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _agent(*extra: str):
    return make_agent(load_config([*SMALL, *extra], "torch"), OBS_SPACE, ACT_SPACE)


def test_only_buffer_device_type_cuda_keeps_rows_on_the_device():
    assert _agent().replay_storage(8) is None  # auto: the host buffer for torch
    assert _agent("agent.buffer_device_type=cpu").replay_storage(8) is None
    storage = _agent("agent.buffer_device_type=cuda").replay_storage(8)
    assert isinstance(storage, TensorRowStorage) and storage.rows.device.type == "cpu"  # the agent's device


def test_ring_wrap_sampling_range_and_checkpoint_round_trip():
    storage = TensorRowStorage(9, 2 * OBS_DIM + ACT_DIM + 3, OBS_DIM, torch.device("cpu"), seed=1)
    device, host = replay_buffer(9, storage), replay_buffer(9)
    rng = np.random.default_rng(0)
    for _ in range(3):  # 6 rows
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
    indices = []
    for _ in range(30):
        state = storage.generator.get_state()
        flat = storage.sample(8, 2.0)
        g = torch.Generator()
        g.set_state(state)
        idx = torch.randint(0, 6, (8,), generator=g).numpy()
        indices += idx.tolist()
        np.testing.assert_array_equal(flat[:, :OBS_DIM].numpy(), host.observation[idx])
        np.testing.assert_array_equal(flat[:, OBS_DIM + ACT_DIM].numpy(), host.reward[idx] / np.float32(2.0))
    assert set(indices) == set(range(6))  # uniform over the stored rows only
    for _ in range(4):  # 14 rows into 9: wraps
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
    saved, expected = device.state_dict(), host.state_dict()
    assert (saved["size"], saved["index"]) == (expected["size"], expected["index"]) == (9, 5)
    for key in BATCH_KEYS:
        np.testing.assert_array_equal(saved[key], expected[key], err_msg=key)
    other = TensorRowStorage(9, storage.width, OBS_DIM, torch.device("cpu"), seed=2)
    restored = replay_buffer(9, other)
    restored.load_state_dict(saved)
    other.load_state_dict(storage.state_dict())
    assert torch.equal(other.rows, storage.rows) and other.size == 9
    assert torch.equal(other.sample(8, 1.0), storage.sample(8, 1.0))


def test_step_equals_update_and_act_on_the_same_rows(tmp_path):
    """agent.step (device rows, device sampling) = host batch of the same rows + update + act, bit for bit, given the
    same global torch RNG state; the metric sums match; the sampler state survives save/load."""
    fused, plain = _agent("agent.buffer_device_type=cuda"), _agent()
    storage = fused.replay_storage(64)
    device, host = replay_buffer(64, storage), replay_buffer(64)
    rng = np.random.default_rng(1)
    for _ in range(10):
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
        assert fused.step(t[5], None, 0, 1.0) is None
    sums: dict[str, float] = {}
    for step in range(3):
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
        noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
        scale, num_updates = 1.5 + step, 2 if step == 2 else 1
        g = torch.Generator()
        g.set_state(storage.generator.get_state())
        global_rng = torch.get_rng_state()  # the updates' own draws (a' ~ pi) come from torch's global generator
        action = fused.step(t[5], noise, num_updates, scale)
        torch.set_rng_state(global_rng)
        for _ in range(num_updates):
            idx = torch.randint(0, host.size, (BATCH,), generator=g).numpy()
            batch = {k: getattr(host, k)[idx] for k in BATCH_KEYS}
            batch["reward"] = (batch["reward"] / np.float32(scale)).astype(np.float32)
            for name, value in plain.update(batch).items():
                sums[name] = sums.get(name, 0.0) + value
        np.testing.assert_array_equal(action, plain.act(t[5], noise))
    for (name, a), b in zip(fused.actor.module.state_dict().items(), plain.actor.module.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    metrics = fused.take_metrics()
    assert set(metrics) == set(sums) and metrics["critic/loss"][1] == 4 and metrics["actor/loss"][1] == 2
    for name, (total, _) in metrics.items():
        np.testing.assert_allclose(total, sums[name], rtol=1e-6, err_msg=name)
    fused.save(str(tmp_path / "agent"))
    other = _agent("agent.buffer_device_type=cuda", "seed=8")
    other_storage = other.replay_storage(64)
    other.load(str(tmp_path / "agent"))
    assert torch.equal(other_storage.generator.get_state(), storage.generator.get_state())


def test_ring_writes_wrap_in_slices_and_refuse_more_rows_than_the_ring():
    from agent_torch.replay import ring_segments

    assert ring_segments(0, 3, 8) == [(0, 0, 3)]
    assert ring_segments(6, 3, 8) == [(6, 0, 2), (0, 2, 1)]
    assert ring_segments(5, 3, 8) == [(5, 0, 3)]
    storage = TensorRowStorage(5, 4, 1, torch.device("cpu"), seed=0)
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    storage.write(3, rows)  # positions 3, 4, 0
    assert np.array_equal(storage.read(5)[[3, 4, 0]], rows) and storage.size == 3
    assert not storage.read(5)[1:3].any()
    with pytest.raises(ValueError, match=r"rows must be \(E <= 5, 4\), got \(6, 4\)"):
        storage.write(0, np.zeros((6, 4), np.float32))
