"""``agent_jax.packing``: the agent state as a few flat buffers for the per-env-step dispatch, on the CPU."""

from __future__ import annotations

import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_common.config import load_config
from agent_jax import agent as agent_module
from agent_jax.agent import FlashSACAgent
from agent_jax.packing import MODES, PackedTree, host_unpack, pack, pack_like, packed, unpack, unpacked
from tests.agent_test_utils import ACT_DIM, ACT_SPACE, NUM_ENVS, OBS_SPACE, random_transition, replay_buffer

TINY = ["agent.actor_hidden_dim=16", "agent.critic_hidden_dim=16", "agent.actor_num_blocks=1",
        "agent.critic_num_blocks=1", "agent.sample_batch_size=16", "num_env_steps=1000", "seed=4"]


def _agent() -> FlashSACAgent:
    return FlashSACAgent(load_config(TINY, framework="jax"), OBS_SPACE, ACT_SPACE)


def _assert_trees_bitwise(a, b) -> None:
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("mode", MODES)
def test_the_agent_state_round_trips_bitwise_and_dispatches_as_few_leaves(mode):
    state = _agent().state
    p = packed(state, mode=mode)
    _assert_trees_bitwise(unpacked(p), state)
    # pack then unpack traced into one program, as env_step runs them (op by op they cost ~9 s of dispatch here)
    _assert_trees_bitwise(jax.jit(lambda tree: unpack(pack(tree, mode)))(state), state)
    leaves = jax.tree_util.tree_leaves(p)
    assert len(leaves) < len(jax.tree_util.tree_leaves(state)) // 3
    assert len(p.buffers) == len(p.layout.group_dtypes) == 3  # float32, int32 (steps), uint32 (the key)
    if mode == "matrices":  # the networks' weight matrices stay apart; no optimizer moment does
        assert len(p.separate) > 0 and all(x.ndim >= 2 for x in p.separate)
        names = {jax.tree_util.keystr(path) for path, x in jax.tree_util.tree_leaves_with_path(state)
                 if any(x is y for y in p.separate)}
        assert not any("opt_state" in n for n in names)
    else:
        assert p.separate == ()


@pytest.mark.parametrize("mode", MODES)
def test_host_unpack_is_the_device_unpack_in_numpy(mode):
    state = _agent().state
    p = packed(state, mode=mode)
    host = host_unpack(p)
    assert all(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(host))
    _assert_trees_bitwise(host, jax.device_get(unpacked(p)))


def test_saving_a_packed_state_keeps_it_packed_and_writes_what_the_unpacked_state_writes(tmp_path):
    agent = _agent()
    buffer = replay_buffer(64, agent.replay_storage(64))
    rng = np.random.default_rng(5)
    for _ in range(3):
        t = random_transition(rng)
        buffer.add(*t)
        agent.step(t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32), 1, 1.0)
    assert agent._state is None and agent._packed is not None
    agent.save(str(tmp_path / "packed"))
    assert agent._state is None  # the checkpoint unpacked nothing on the device
    agent.state  # noqa: B018  (unpacks on the device)
    agent.save(str(tmp_path / "unpacked"))
    for name in sorted(os.listdir(tmp_path / "packed")):
        with open(tmp_path / "packed" / name, "rb") as a, open(tmp_path / "unpacked" / name, "rb") as b:
            _assert_trees_bitwise(pickle.load(a), pickle.load(b))


def test_a_tree_that_does_not_fit_the_layout_is_refused_naming_the_argument():
    tree = {"a": jnp.zeros((2, 3)), "b": jnp.ones(4, jnp.int32)}
    layout = pack(tree, "all").layout
    with pytest.raises(ValueError, match="tree: a leaf is"):
        pack_like({"a": jnp.zeros((3, 2)), "b": jnp.ones(4, jnp.int32)}, layout)
    with pytest.raises(ValueError, match="tree: structure differs"):
        pack_like({"a": jnp.zeros((2, 3))}, layout)
    with pytest.raises(ValueError, match="mode: expected one of"):
        pack(tree, "some")
    assert isinstance(jax.jit(lambda p: p)(pack(tree, "all")), PackedTree)  # a pytree: passes through jit


VARIANTS = [None, "matrices", "all"]


def test_fused_steps_with_a_packed_state_equal_those_with_the_plain_state(monkeypatch):
    """The same steps from identical agents, handing ``env_step`` the packed state or the AgentState: the actions (of
    ``step`` and of ``act``), metrics and final state are bitwise equal (packing moves bytes, it changes no
    value)."""
    agents = {}
    for mode in VARIANTS:
        monkeypatch.setattr(agent_module, "STATE_PACKING", mode)
        agent = _agent()
        storage = agent.replay_storage(64)
        rng = np.random.default_rng(1)
        buffer = replay_buffer(64, storage)
        actions = []
        for step in range(16):
            t = random_transition(rng)
            buffer.add(*t)
            noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32) if step >= 11 else None
            actions.append(agent.step(t[5], noise, 1 if step >= 12 else 0, 1.5))
            if step == 13:
                _ = agent.state  # read between steps (as an evaluation would): the next step continues from it
        actions.append(agent.act(t[5], None))
        actions.append(agent.act(t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)))
        agents[mode] = (agent, actions, agent.take_metrics())
    base, base_actions, base_metrics = agents[VARIANTS[0]]
    assert isinstance(agents["matrices"][0]._packed, PackedTree)
    for variant in VARIANTS[1:]:
        agent, actions, metrics = agents[variant]
        for x, y in zip(actions, base_actions, strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                np.testing.assert_array_equal(x, y)
        assert metrics == base_metrics
        _assert_trees_bitwise(agent.state, base.state)


def test_host_replay_updates_and_actions_with_a_packed_state_equal_those_with_the_plain_state(monkeypatch):
    """The host-replay path (``update`` on a numpy batch, ``act``, the evaluation's ``policy_snapshot``) on the packed
    state or on the AgentState: bitwise the same actions, metrics and final state; acting from the packed state
    dispatches the few arrays that hold the actor, not its leaves, and unpacks nothing."""
    from tests.data.make_fused_update_golden import fixed_batches

    rng = np.random.default_rng(2)
    observation = rng.standard_normal((NUM_ENVS, OBS_SPACE.shape[0])).astype(np.float32)
    noise = rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)
    runs = {}
    for mode in VARIANTS:
        monkeypatch.setattr(agent_module, "STATE_PACKING", mode)
        agent = _agent()
        out, metrics = [], []
        for batch in fixed_batches(3):
            metrics.append(agent.update(batch))
            out += [agent.act(observation, noise), agent.act(observation, None), agent.policy_snapshot()(observation)]
        if mode is not None:
            assert isinstance(agent._packed, PackedTree) and agent._state is None  # acting unpacked nothing
            arrays, _ = agent.actor_leaves()
            assert len(arrays) < len(jax.tree_util.tree_leaves((agent.state.actor.params,
                                                                agent.state.actor.batch_stats))) // 2
        metrics.append(agent.flush_metrics())
        runs[mode] = (agent, out, metrics)
    base, base_out, base_metrics = runs[None]
    for mode in VARIANTS:
        agent, out, metrics = runs[mode]
        for x, y in zip(out, base_out, strict=True):
            assert x.tobytes() == y.tobytes()
        assert metrics == base_metrics
        _assert_trees_bitwise(agent.state, base.state)
