"""The JAX agent's fused env step (agent_jax/step.py) and its device replay rows, on the CPU.

The fused step (store rows -> update(s) on batches sampled on the device -> next action, one jitted call) must do
exactly what the unfused path does (host buffer, ``agent.update`` on a numpy batch, ``agent.act``) when both use
the same batch rows: the only intended difference is where the batch indices come from (the device replay's own
PRNG key instead of the host buffer's numpy generator), so the unfused side here samples with the same key.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from agent_common.buffer import ROW_KEYS, flat_batch
from agent_common.config import load_config
from agent_jax import step as step_module
from agent_jax.agent import FlashSACAgent
from agent_jax.step import (
    METRIC_NAMES,
    DeviceRowStorage,
    create_device_replay,
    env_step,
    insert_rows,
    row_width,
    sample_batch,
    write_chunk,
)
from tests.agent_test_utils import ACT_DIM, ACT_SPACE, NUM_ENVS, OBS_DIM, OBS_SPACE, random_transition, replay_buffer

BATCH = 16
# The sizes of tests/test_agent_jax_update.py and test_agent_jax_train.py (shared compiled update steps).
TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", f"agent.sample_batch_size={BATCH}", "num_env_steps=1000", "seed=4"]


def _agent(*extra: str) -> FlashSACAgent:
    return FlashSACAgent(load_config([*TINY, *extra], framework="jax"), OBS_SPACE, ACT_SPACE)


def test_device_rows_match_the_host_buffer_through_a_ring_wrap_and_round_trip():
    """25 steps of 2 envs into 10 rows: the device rows, index and size equal the host buffer's; a checkpoint of the
    device buffer (state_dict) has the host format and loads back into a fresh device buffer unchanged."""
    agent = _agent()
    storage = agent.replay_storage(10)
    device, host = replay_buffer(10, storage), replay_buffer(10)
    rng = np.random.default_rng(0)
    for _ in range(25):
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
        assert agent.step(t[5], None, 0, 1.0) is None  # warm-up: staged on the host
    assert (device.size, device.index) == (host.size, host.index) == (10, 0)
    saved, expected = device.state_dict(), host.state_dict()  # reading the rows writes the staged ones
    assert storage.staged == 0
    assert (int(storage.replay.size), int(storage.replay.index)) == (10, 0)
    for key in ("observation", "action", "reward", "terminated", "truncated", "next_observation"):
        np.testing.assert_array_equal(saved[key], expected[key], err_msg=key)
    other = _agent()
    restored = replay_buffer(10, other.replay_storage(10))
    restored.load_state_dict(saved)
    np.testing.assert_array_equal(np.asarray(other._storage.replay.rows), np.asarray(storage.replay.rows))
    assert int(other._storage.replay.index) == 0 and int(other._storage.replay.size) == 10
    with pytest.raises(RuntimeError, match="agent's storage"):
        device.sample(4)


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 20, 23])
def test_reading_the_device_rows_in_fixed_chunks_returns_the_first_rows(monkeypatch, size):
    monkeypatch.setattr(step_module, "READ_CHUNK_ROWS", 8)  # 23 rows: two whole chunks and one ending at the capacity
    replay = create_device_replay(23, 5, np.zeros(2, np.uint32), jax.devices("cpu")[0])
    rows = np.arange(23 * 5, dtype=np.float32).reshape(23, 5)
    storage = DeviceRowStorage(replay.replace(rows=jax.numpy.asarray(rows)), observation_dim=1)
    got = storage.read(size)
    assert got.shape == (size, 5) and got.dtype == np.float32
    np.testing.assert_array_equal(got, rows[:size])


@pytest.mark.parametrize(("num_envs", "staging_rows"), [(2, 7), (3, 4096), (3, 5), (4, 3)])
def test_staged_bulk_writes_leave_the_rows_of_per_step_stores(num_envs, staging_rows):
    """Rows staged on the host and written in chunks (the staging area filling up, ``take_pending`` before a step
    with device work, ``flush``) leave the device rows, ring index and size bitwise equal to one ``insert_rows`` per
    write, through several ring wraps of a 10-row buffer (also inside one chunk), with one executable for all chunk
    fills; the (4, 3) case has writes larger than the staging area (it grows to the write)."""
    width = row_width(OBS_DIM, ACT_DIM)
    cpu = jax.devices("cpu")[0]
    key = np.asarray(jax.random.PRNGKey(3))
    storage = DeviceRowStorage(create_device_replay(10, width, key, cpu), OBS_DIM, staging_rows=staging_rows)
    expected = create_device_replay(10, width, key, cpu)
    compiled_before = write_chunk._cache_size()
    rng = np.random.default_rng(num_envs)
    index = 0
    for step in range(1, 31):
        rows = rng.standard_normal((num_envs, width)).astype(np.float32)
        storage.write(index, rows)
        index = (index + num_envs) % 10
        if step % 11 == 0:  # a step with device work: the older rows are written, the newest handed over
            pending = storage.take_pending()
            np.testing.assert_array_equal(pending, rows)
            storage.replay = insert_rows(storage.replay, pending)
        if step % 13 == 0:
            storage.flush()
        assert storage.staged <= max(staging_rows, num_envs)
        expected = insert_rows(expected, rows)
        if storage.staged == 0:
            assert int(storage.replay.index) == int(expected.index) == index
    storage.flush()
    assert storage.staged == 0 and storage.take_pending() is None
    np.testing.assert_array_equal(np.asarray(storage.replay.rows), np.asarray(expected.rows))
    assert (int(storage.replay.index), int(storage.replay.size)) == (int(expected.index), int(expected.size)) == (
        index, 10)
    np.testing.assert_array_equal(storage.read(10), np.asarray(expected.rows))
    assert write_chunk._cache_size() - compiled_before <= (2 if num_envs > staging_rows else 1)
    with pytest.raises(ValueError, match="ring index 5, expected"):
        storage.write(5 if index != 5 else 6, rows)
    with pytest.raises(ValueError, match=r"rows must be \(E <= 10"):
        storage.write(index, np.zeros((11, width), np.float32))


def test_warm_up_steps_make_no_device_call_until_device_work_is_due():
    """``step`` with neither updates nor an action keeps the rows staged (the device replay unchanged); the first
    step that acts writes them all before its own work, which then sees every row."""
    agent = _agent()
    storage = agent.replay_storage(64)
    buffer = replay_buffer(64, storage)
    reference = replay_buffer(64)
    rng = np.random.default_rng(5)
    before = np.asarray(storage.replay.rows).copy()
    for _ in range(9):
        t = random_transition(rng)
        buffer.add(*t)
        reference.add(*t)
        assert agent.step(t[5], None, 0, 1.0) is None
    assert storage.staged == 18 and int(storage.replay.size) == 0
    np.testing.assert_array_equal(np.asarray(storage.replay.rows), before)
    t = random_transition(rng)
    buffer.add(*t)
    reference.add(*t)
    noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
    assert agent.step(t[5], noise, 0, 1.0).shape == (NUM_ENVS, ACT_DIM)
    assert storage.staged == 0 and int(storage.replay.size) == 20
    stored = np.asarray(storage.replay.rows)[:20]
    np.testing.assert_array_equal(stored, flat_batch(reference.state_dict(), keys=ROW_KEYS))


def test_sampled_indices_stay_in_the_stored_range_and_cover_it():
    replay = create_device_replay(64, row_width(OBS_DIM, ACT_DIM), np.asarray(jax.random.PRNGKey(1)),
                                  jax.devices("cpu")[0])
    rows = np.arange(5 * row_width(OBS_DIM, ACT_DIM), dtype=np.float32).reshape(5, -1)
    replay = insert_rows(replay, rows)
    seen = set()
    for _ in range(20):
        replay, batch, indices = sample_batch(replay, 32, OBS_DIM, np.float32(2.0))
        idx = np.asarray(indices)
        assert idx.min() >= 0 and idx.max() < 5
        seen.update(idx.tolist())
        np.testing.assert_array_equal(np.asarray(batch.observation), rows[idx, :OBS_DIM])
        np.testing.assert_array_equal(np.asarray(batch.reward), rows[idx, OBS_DIM + ACT_DIM] / 2.0)
    assert seen == set(range(5))


def test_fused_step_equals_the_unfused_path_on_the_same_rows():
    """From identical agents: the fused step (store, update on device-sampled rows, act) gives the same actions,
    metrics and parameters as the unfused path (host batch of the same rows, ``update``, ``act``).

    Not bit for bit: XLA fuses the larger program differently, so some parameters differ by float32 rounding
    (measured on this CPU after 5 updates: at most 1 ulp, 1.2e-7 absolute, 1.9e-6 relative; actions and metric sums
    equal). The bounds are ~10x that and far below what a wrong row, scale or update order gives (> 1e-4)."""
    fused, unfused = _agent(), _agent()
    storage = fused.replay_storage(64)
    device, host = replay_buffer(64, storage), replay_buffer(64)
    rng = np.random.default_rng(1)
    key = np.asarray(jax.random.fold_in(jax.random.PRNGKey(4), 2))  # the device replay's sampler key (seed 4)
    np.testing.assert_array_equal(np.asarray(storage.replay.key), key)
    for _ in range(12):  # warm-up rows
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
        fused.step(t[5], None, 0, 1.0)
    meter: dict[str, list[float]] = {}
    for step in range(4):  # actor+critic, critic-only, actor+critic, then two updates in one step
        t = random_transition(rng)
        device.add(*t)
        host.add(*t)
        observation, noise = t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
        scale = 1.7 + step
        num_updates = 2 if step == 3 else 1
        action = fused.step(observation, noise, num_updates, scale)
        for _ in range(num_updates):
            key, sample_key = jax.random.split(key)
            idx = np.asarray(jax.random.randint(sample_key, (BATCH,), 0, host.size, dtype=np.int32))
            batch = {k: getattr(host, k)[idx] for k in ("observation", "action", "reward", "terminated",
                                                        "truncated", "next_observation")}
            batch["reward"] = (batch["reward"] / np.float32(scale)).astype(np.float32)
            for name, value in unfused.update(batch).items():
                meter.setdefault(name, []).append(value)
        np.testing.assert_allclose(action, unfused.act(observation, noise), rtol=0, atol=1e-6,
                                   err_msg=f"step {step}")
    for name, value in unfused.flush_metrics().items():
        meter.setdefault(name, []).append(value)
    assert fused.update_step == unfused.update_step == 5
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(fused.state),
                            jax.tree_util.tree_leaves(unfused.state), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-5, atol=1e-6,
                                   err_msg=jax.tree_util.keystr(path))
    metrics = fused.take_metrics()
    assert set(metrics) == set(METRIC_NAMES) == set(meter)
    for name, (total, count) in metrics.items():
        assert count == len(meter[name])
        np.testing.assert_allclose(total, np.sum(np.asarray(meter[name], np.float32)), rtol=1e-6, err_msg=name)
    assert fused.take_metrics() == {}  # taken: the sums start again


def test_agent_checkpoint_keeps_the_sampler_key_and_metric_sums(tmp_path):
    agent = _agent()
    storage = agent.replay_storage(64)  # as above: the same executables
    buffer = replay_buffer(64, storage)
    rng = np.random.default_rng(2)
    for _ in range(6):
        t = random_transition(rng)
        buffer.add(*t)
        agent.step(t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32), 1, 1.0)
    agent.save(str(tmp_path / "agent"))
    other = _agent("seed=9")
    other_buffer = replay_buffer(64, other.replay_storage(64))
    other.load(str(tmp_path / "agent"))
    other_buffer.load_state_dict(buffer.state_dict())
    np.testing.assert_array_equal(np.asarray(other._storage.replay.key), np.asarray(storage.replay.key))
    t = random_transition(rng)
    noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
    for b in (buffer, other_buffer):
        b.add(*t)
    np.testing.assert_array_equal(agent.step(t[5], noise, 1, 1.3), other.step(t[5], noise, 1, 1.3))
    assert agent.take_metrics() == other.take_metrics()


def test_act_on_cached_leaves_equals_the_policy_on_the_live_state():
    """``act`` (the actor's leaves flattened once per state, no noise array when deterministic) gives bitwise the
    actions of ``policy_actions`` on the current params, also after a step has replaced the state."""
    from agent_jax import agent as agent_module
    from agent_jax.step import policy_actions

    agent = _agent()
    storage = agent.replay_storage(64)
    buffer = replay_buffer(64, storage)
    rng = np.random.default_rng(6)

    def expected(observation, noise):
        actor = agent.state.actor
        eps = np.zeros((observation.shape[0], ACT_DIM), np.float32) if noise is None else noise
        return np.asarray(jax.jit(policy_actions, static_argnames=("actor_def", "deterministic"))(
            agent._actor_def, actor.params, actor.batch_stats, observation, eps, deterministic=noise is None))

    for _ in range(3):
        observation = rng.standard_normal((NUM_ENVS, OBS_DIM)).astype(np.float32)
        noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
        for eps in (None, noise):
            assert agent.act(observation, eps).tobytes() == expected(observation, eps).tobytes()
        leaves = agent.actor_leaves()[0]
        assert agent.act(observation, None) is not None and agent.actor_leaves()[0] is leaves  # cached
        # one program writes the action to pinned host memory (no device-to-host read after it)
        dispatched = agent_module._act_on_leaves(agent._actor_def, *agent.actor_leaves(), observation, noise, True)
        assert dispatched.sharding.memory_kind == "pinned_host"
        t = random_transition(rng)
        buffer.add(*t)
        agent.step(t[5], noise, 1, 1.0)  # an update: new params (the old ones donated), so act flattens again
        assert agent.act(t[5], None).tobytes() == expected(t[5], None).tobytes()
        assert agent.actor_leaves()[0] is not leaves


def test_background_compilation_serves_the_first_fused_steps(caplog):
    """``precompile_step`` compiles the first two due steps' programs (actor and critic-only) on a thread; the
    first fused steps then compile nothing (no compilation log of ``env_step``) and act exactly as an agent that
    compiled them itself."""
    import logging

    agent, other = _agent(), _agent()
    # a buffer shape of its own
    buffers = [replay_buffer(48, agent.replay_storage(48)), replay_buffer(48, other.replay_storage(48))]
    thread = agent.precompile_step(NUM_ENVS)
    assert thread is not None and len(agent._precompiling) == 2
    thread.join()
    rng = np.random.default_rng(7)
    for step in range(6):
        t = random_transition(rng)
        noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
        for b in buffers:
            b.add(*t)
        warm_up = step < 4
        if step == 4:
            caplog.clear()
            with jax.log_compiles(True), caplog.at_level(logging.DEBUG):
                action = agent.step(t[5], noise, 1, 1.0)
            assert not [r for r in caplog.records if "env_step" in r.getMessage()]
        elif not warm_up:
            action = agent.step(t[5], noise, 1, 1.0)
        else:
            agent.step(t[5], None, 0, 1.0)
        expected = other.step(t[5], None if warm_up else noise, 0 if warm_up else 1, 1.0)
        if not warm_up:
            np.testing.assert_array_equal(action, expected)
    assert not agent._precompiling  # both programs were used


def test_action_in_pinned_host_memory_is_the_device_action_bitwise(monkeypatch):
    """``env_step(host_action=True)`` (the default, ``ACTION_ON_HOST``) hands back the action in pinned host
    memory, with the values of the device action; the two agents' whole steps (updates included) stay bitwise equal."""
    from agent_jax import agent as agent_module

    assert agent_module.ACTION_ON_HOST
    actions, states = {}, {}
    for on_host in (True, False):
        monkeypatch.setattr(agent_module, "ACTION_ON_HOST", on_host)
        agent = _agent()
        storage = agent.replay_storage(64)
        buffer = replay_buffer(64, storage)
        rng = np.random.default_rng(9)
        out = []
        for i in range(BATCH + 6):
            t = random_transition(rng)
            buffer.add(*t)
            noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
            out.append(agent.step(t[5], noise, int(i >= BATCH), 1.0))
        actions[on_host] = np.stack(out)
        states[on_host] = jax.tree_util.tree_leaves(jax.device_get(agent.state))
        if on_host:  # the program's own result: the action lives in pinned host memory
            key = agent._step_key(NUM_ENVS, True, (True,), True)
            assert dict(key)["host_action"]
            _, storage.replay, action = env_step(agent._step_state(), storage.replay,
                                                 np.zeros(NUM_ENVS * (row_width(OBS_DIM, ACT_DIM) + OBS_DIM + ACT_DIM)
                                                          + 1, np.float32), agent.ctx, **dict(key))
            assert action.sharding.memory_kind == "pinned_host"
    np.testing.assert_array_equal(actions[True], actions[False])
    for a, b in zip(states[True], states[False], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
