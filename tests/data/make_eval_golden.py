"""The reference evaluation of ``tests/test_eval_golden.py``: the deterministic evaluation returns of both agents on a
fixed seed, acting through ``agent.act(obs, None)`` (one call per env step, as the loop of commit 2b3c4af did).

For each framework, the freshly initialised agent (seed 0, the paper head, whose orthogonal mean head gives actions
of order one) is evaluated as the training loop evaluates at step 0: ``loop``, ``agent_common.envs.evaluate`` of
``num_eval_episodes`` (three) on the loop's evaluation env (``make_vec_env`` with the run's seed, reset once with
it; HalfCheetah-v4 cut at 40 steps); ``policy``, ``agent_common.policy.run_episodes`` (two episodes, seed 5).
Returns are ``repr`` strings so the comparison is bitwise. ``python tests/data/make_eval_golden.py`` prints them.
"""

from __future__ import annotations

import json

OVERRIDES = [
    "seed=0",
    "num_threads=1",
    "deterministic=true",
    "progress_bar=false",
    "logger_type=none",
    "env.env_name=HalfCheetah-v4",
    "env.max_episode_steps=40",
    "agent.actor_hidden_dim=32",
    "agent.actor_num_blocks=2",
    "agent.critic_hidden_dim=16",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=16",
    "agent.buffer_max_length=1000",
    "agent.buffer_min_length=30",
    "agent.device_type=cpu",
    "num_eval_envs=1",
    "num_eval_episodes=3",
    "num_env_steps=100",
]
POLICY_EPISODES, POLICY_SEED = 2, 5


def overrides(framework: str) -> list[str]:
    """The golden config's overrides for ``framework`` (the torch agent takes the reference TD-target backend)."""
    return OVERRIDES + (["agent.categorical_target_backend=torch"] if framework == "torch" else [])


def make_agent_factory(framework: str):  # noqa: ANN201  an agent_common.protocol.AgentFactory
    if framework == "torch":
        from agent_torch.agent import make_agent
    else:
        from agent_jax.agent import make_agent
    return make_agent


def golden_returns(framework: str) -> dict[str, object]:
    """{"loop": the step-0 evaluation's metrics as reprs, "policy": the policy episodes' returns as reprs}, acting
    through ``agent.act(obs, None)``."""
    from agent_common.config import load_config
    from agent_common.envs import evaluate, make_vec_env
    from agent_common.policy import run_episodes

    cfg = load_config(overrides(framework), framework)  # type: ignore[arg-type]
    env = cfg.env
    envs = make_vec_env(env.env_name, cfg.num_eval_envs, cfg.seed, env.rescale_action, env.max_episode_steps,
                        env.env_type)
    try:
        envs.reset(seed=cfg.seed)
        agent = make_agent_factory(framework)(cfg, envs.single_observation_space, envs.single_action_space)

        def act(observation):  # noqa: ANN001, ANN202
            return agent.act(observation, None)

        metrics = evaluate(act, envs, cfg.num_eval_episodes)
        returns = run_episodes(act, cfg, POLICY_EPISODES, POLICY_SEED)
    finally:
        envs.close()
    return {"loop": {k: repr(v) for k, v in metrics.items()}, "policy": [repr(r) for r in returns]}


def main() -> None:
    print(json.dumps({framework: golden_returns(framework) for framework in ("torch", "jax")}, indent=1))


if __name__ == "__main__":
    main()
