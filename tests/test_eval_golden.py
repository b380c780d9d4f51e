"""Evaluation on a fixed seed: the training loop's evaluation and the ``Policy`` episodes of both agents give
bitwise the returns saved at commit 2b3c4af (``tests/data/make_eval_golden.py``), now that they act through the
agents' host-side ``policy_snapshot()``; the loop's evaluation makes no ``act`` call (no device round trip per
action) and each evaluation takes a fresh snapshot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.data.make_eval_golden import PATH, golden_returns, make_agent_factory, overrides


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_evaluation_returns_equal_the_golden_ones(framework):
    with open(PATH) as f:
        golden = json.load(f)[framework]
    assert golden_returns(framework) == golden


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_loop_evaluation_acts_through_a_fresh_host_snapshot(framework, monkeypatch):
    """The loop's evaluation calls ``policy_snapshot()`` once per evaluation and never ``act``; the snapshot's
    actions equal ``act(obs, None)`` bitwise on the CPU, and a snapshot taken before a weight change keeps acting
    with the old weights."""
    from agent_common.config import load_config
    from agent_common.loop import _Loop

    cfg = load_config(overrides(framework), framework)  # type: ignore[arg-type]
    loop = _Loop(cfg, make_agent_factory(framework))
    try:
        agent = loop.agent
        obs = np.random.default_rng(3).standard_normal((4, 17)).astype(np.float32)
        before = agent.act(obs, None)
        snapshot = agent.policy_snapshot()
        np.testing.assert_array_equal(snapshot(obs), before)
        snapshots = []
        real_snapshot = agent.policy_snapshot

        def counted_snapshot():
            snapshots.append(1)
            return real_snapshot()

        def no_act(observation, noise):
            raise AssertionError("the evaluation called act")

        monkeypatch.setattr(agent, "policy_snapshot", counted_snapshot)
        monkeypatch.setattr(agent, "act", no_act)
        loop.evaluate()
        loop.evaluate()
        assert len(snapshots) == 2
        monkeypatch.undo()
        _scale_actor_mean_head(agent, framework, 2.0)
        after = agent.act(obs, None)
        assert not np.array_equal(after, before)
        np.testing.assert_array_equal(snapshot(obs), before)
        np.testing.assert_array_equal(agent.policy_snapshot()(obs), after)
    finally:
        loop.close()


def _scale_actor_mean_head(agent, framework: str, factor: float) -> None:
    """Multiplies the actor's mean-head weight by ``factor`` in place (torch) or in a replaced state (JAX)."""
    if framework == "torch":
        import torch

        with torch.no_grad():
            agent.actor.module.mean_head.weight.mul_(factor)
        return
    import flax

    state = agent.state
    params = flax.core.unfreeze(state.actor.params) if hasattr(flax.core, "unfreeze") else dict(state.actor.params)
    params = dict(params)
    params["mean_head"] = {"weight": params["mean_head"]["weight"] * factor}
    agent.state = state.replace(actor=state.actor.replace(params=params))
