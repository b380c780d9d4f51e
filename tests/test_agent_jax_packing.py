"""``agent_jax.packing``: the agent state as a few flat buffers for the per-env-step dispatch, on the CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_common.config import load_config
from agent_jax import agent as agent_module
from agent_jax.agent import FlashSACAgent
from agent_jax.packing import MODES, PackedTree, pack, pack_like, packed, unpack, unpacked
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
    _assert_trees_bitwise(unpack(pack(state, mode)), state)
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


VARIANTS = [(None, "default"), ("matrices", "default"), ("all", "default"), ("matrices", "pinned")]


def test_fused_steps_with_a_packed_state_equal_those_with_the_plain_state(monkeypatch):
    """The same steps from identical agents, handing ``env_step`` the packed state or the AgentState, with the host
    inputs and the action as numpy or through pinned host memory: the actions (of ``step`` and of ``act``),
    metrics and final state are bitwise equal (packing and the transfer route move bytes, they change no value)."""
    agents = {}
    for mode, transfers in VARIANTS:
        monkeypatch.setattr(agent_module, "STATE_PACKING", mode)
        monkeypatch.setattr(agent_module, "HOST_TRANSFERS", transfers)
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
        assert agent._host_io() == (transfers == "pinned")  # the CPU has pinned host memory; "auto" keeps numpy
        actions.append(agent.act(t[5], None))
        actions.append(agent.act(t[5], rng.standard_normal((NUM_ENVS, ACT_DIM)).astype(np.float32)))
        agents[mode, transfers] = (agent, actions, agent.take_metrics())
    base, base_actions, base_metrics = agents[VARIANTS[0]]
    assert isinstance(agents["matrices", "default"][0]._packed, PackedTree)
    for variant in VARIANTS[1:]:
        agent, actions, metrics = agents[variant]
        for x, y in zip(actions, base_actions, strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                np.testing.assert_array_equal(x, y)
        assert metrics == base_metrics
        _assert_trees_bitwise(agent.state, base.state)
