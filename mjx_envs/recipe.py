"""Upstream's GPU-simulator recipe for an MJX task, as ``--overrides`` (standard library only).

Upstream trains on GPU simulators with 1024 parallel environments, batch 2048, 2 updates per interaction step
(one interaction step = one step of every env), the replay buffer on the GPU (10M rows, updates after 100k) and AMP
on (docs/flashsac.md, "MJX environments"). The Brax locomotion tasks are the gym-MuJoCo ones, so γ and n-step stay
at the CPU-sim recipe's 0.99 and 1. AMP applies to the torch agent only (the JAX agent has none and rejects it).
"""

from __future__ import annotations

__all__ = ["GPU_RECIPE", "TORCH_AMP", "gpu_recipe"]

GPU_RECIPE: tuple[str, ...] = (
    "env.env_type=mjx",
    "num_train_envs=1024",
    "num_eval_envs=50",
    "num_eval_episodes=50",
    "num_env_steps=50_000_896",
    "updates_per_interaction_step=2",
    "agent.sample_batch_size=2048",
    "agent.buffer_max_length=10_000_000",
    "agent.buffer_min_length=100_000",
    "agent.buffer_device_type=cuda",
    "gamma=0.99",
    "n_step=1",
)
"""The recipe's overrides for both agents; docs/flashsac.md shows the same list (tests/test_mjx_envs.py checks)."""

TORCH_AMP = "agent.use_amp=true"
"""Added for the torch agent: fp16 autocast pays off at batch 2048."""


def gpu_recipe(task: str = "halfcheetah", framework: str = "torch") -> list[str]:
    """The recipe for one MJX task (``agent_common.schema.MJX_TASKS``) and agent, as ``--overrides`` values."""
    if framework not in ("torch", "jax"):
        raise ValueError(f"framework: expected 'torch' or 'jax', got {framework!r}")
    amp = [TORCH_AMP] if framework == "torch" else []
    return [GPU_RECIPE[0], f"env.env_name={task}", *GPU_RECIPE[1:], *amp]
