"""Evaluation on a fixed seed: the training loop's step-0 evaluation and the ``Policy`` episodes of both agents give
bitwise the returns of the same evaluation acting through ``agent.act(obs, None)`` (one call per env step; the
reference of ``tests/data/make_eval_golden.py``, which commit 2b3c4af's loop used), computed in the same process, now
that they act through the agents' host-side ``policy_snapshot()``: a training run makes no deterministic ``act``
call (no device round trip per evaluation action) and takes one snapshot per evaluation. The reference runs here
rather than from stored numbers because the returns of a 40-step HalfCheetah episode depend on the CPU's GEMM
kernels (an AVX2 EPYC and the machine of the stored numbers differed by 2-4 % after 40 steps)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.data.make_eval_golden import POLICY_EPISODES, POLICY_SEED, golden_returns, make_agent_factory, overrides


def _agent_class(framework: str) -> type:
    if framework == "torch":
        from agent_torch.agent import FlashSACAgent
    else:
        from agent_jax.agent import FlashSACAgent
    return FlashSACAgent


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_training_evaluations_act_through_snapshots_with_the_golden_returns(framework, tmp_path, monkeypatch):
    from agent_common.config import load_config
    from agent_common.driver import train
    from agent_common.host import host_trainer

    golden = golden_returns(framework)["loop"]
    cls = _agent_class(framework)
    real_act, real_snapshot = cls.act, cls.policy_snapshot
    deterministic_acts, snapshots = [], []

    def act(self, observation, noise):
        if noise is None:
            deterministic_acts.append(1)
        return real_act(self, observation, noise)

    def policy_snapshot(self):
        snapshots.append(1)
        return real_snapshot(self)

    monkeypatch.setattr(cls, "act", act)
    monkeypatch.setattr(cls, "policy_snapshot", policy_snapshot)
    cfg = load_config([*overrides(framework), "num_env_steps=40", "evaluation_per_interaction_step=40",
                       "save_checkpoint_per_interaction_step=40", f"save_path={tmp_path / 'run'}"], framework)
    result = train(cfg, host_trainer(make_agent_factory(framework)))
    assert [step for step, _ in result.evaluations] == [0, 40]
    assert {k: repr(v) for k, v in result.evaluations[0][1].items()} == golden
    assert deterministic_acts == [] and len(snapshots) == 2


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_policy_returns_equal_the_golden_ones_and_snapshots_keep_their_weights(framework):
    """``Policy`` (deterministic) acts through a snapshot with the golden returns; a snapshot equals
    ``act(obs, None)`` bitwise on the CPU and keeps acting with the weights it was taken from."""
    from agent_common.config import load_config
    from agent_common.envs import make_env
    from agent_common.host import evaluation_policy
    from agent_common.policy import Policy, run_episodes

    golden = golden_returns(framework)["policy"]
    cfg = load_config(overrides(framework), framework)  # type: ignore[arg-type]
    env = make_env(cfg.env.env_name, cfg.seed, cfg.env.rescale_action, cfg.env.max_episode_steps)
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    agent = make_agent_factory(framework)(cfg, obs_space, act_space)
    policy = Policy(agent, cfg, "", int(obs_space.shape[0]), int(act_space.shape[0]))
    assert [repr(r) for r in run_episodes(policy, cfg, POLICY_EPISODES, POLICY_SEED)] == golden
    obs = np.random.default_rng(3).standard_normal((4, int(obs_space.shape[0]))).astype(np.float32)
    before = agent.act(obs, None)
    snapshot = evaluation_policy(agent)
    np.testing.assert_array_equal(snapshot(obs), before)
    _scale_actor_mean_head(agent, framework, 2.0)
    after = agent.act(obs, None)
    assert not np.array_equal(after, before)
    np.testing.assert_array_equal(snapshot(obs), before)
    np.testing.assert_array_equal(evaluation_policy(agent)(obs), after)


def _scale_actor_mean_head(agent, framework: str, factor: float) -> None:
    """Multiplies the actor's mean-head weight by ``factor`` in place (torch) or in a replaced state (JAX)."""
    if framework == "torch":
        import torch

        with torch.no_grad():
            agent.actor.module.mean_head.weight.mul_(factor)
        return
    state = agent.state
    params = dict(state.actor.params)
    params["mean_head"] = {"weight": params["mean_head"]["weight"] * factor}
    agent.state = state.replace(actor=state.actor.replace(params=params))
