"""Writes ``eval_golden.json``: the deterministic evaluation returns of both agents on a fixed seed.

For each framework: the training loop's evaluation (``agent_common.loop._Loop.evaluate``, one eval env, three
episodes of HalfCheetah-v4 cut at 40 steps) of the freshly initialised agent (seed 0, the paper head, whose
orthogonal mean head gives actions of order one), and ``agent_common.policy.run_episodes`` of the same agent as a
``Policy`` (two episodes, seed 5). Returns are stored as ``repr`` strings so the comparison is bitwise.

The committed file was written by this script at commit 2b3c4af, on the CPU with one thread;
``tests/test_eval_golden.py`` compares today's evaluation with it. Regenerate only when the evaluation is meant to
change: ``PYTHONPATH=$PWD python tests/data/make_eval_golden.py``.
"""

from __future__ import annotations

import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "eval_golden.json")
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
    """{"loop": the loop evaluation's metrics as reprs, "policy": the policy episodes' returns as reprs}."""
    from agent_common.config import load_config
    from agent_common.loop import _Loop
    from agent_common.policy import Policy, run_episodes

    cfg = load_config(overrides(framework), framework)  # type: ignore[arg-type]
    loop = _Loop(cfg, make_agent_factory(framework))
    try:
        metrics = loop.evaluate()
        obs_dim = int(loop.train_envs.single_observation_space.shape[0])
        act_dim = int(loop.train_envs.single_action_space.shape[0])
        policy = Policy(loop.agent, cfg, "", obs_dim, act_dim)
        returns = run_episodes(policy, cfg, POLICY_EPISODES, POLICY_SEED)
    finally:
        loop.close()
    return {"loop": {k: repr(v) for k, v in metrics.items()}, "policy": [repr(r) for r in returns]}


def main() -> None:
    data = {framework: golden_returns(framework) for framework in ("torch", "jax")}
    with open(PATH, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(data, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
