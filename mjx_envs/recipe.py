"""Upstream's GPU-simulator recipe for an MJX task, as ``--overrides`` (standard library only).

Upstream trains on GPU simulators with 1024 parallel environments, batch 2048, 2 updates per interaction step
(one interaction step = one step of every env), the replay buffer on the GPU (10M rows, updates after 100k) and AMP
on (docs/flashsac.md, "MJX environments"). The Brax locomotion tasks are the gym-MuJoCo ones, so γ and n-step stay
at the CPU-sim recipe's 0.99 and 1. AMP applies to the torch agent only (the JAX agent has none and rejects it).
"""

from __future__ import annotations

__all__ = ["DEVICE_LOOPS_FLAG", "DETERMINISTIC_FLAG", "GPU_RECIPE", "TORCH_AMP", "gpu_recipe", "mjx_xla_flags"]

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


DEVICE_LOOPS_FLAG = "--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL"
"""XLA flag for processes that step MJX environments: XLA's command buffers (CUDA graphs) also take while loops and
conditionals, so the while loops of MJX's constraint solver iterate on the device instead of copying each
iteration's condition to the host. On the H200 the batched halfcheetah step ran 2.5x faster with it (70.7k against
27.9k env steps/s at 1024 envs) and, with deterministic ops, computed bitwise the same rollout
(bench/results/h200-2026-12-01-xla-flags)."""

DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
"""XLA flag for deterministic GPU ops (``deterministic=true``): XLA's default ops make GPU results vary between runs."""


def mjx_xla_flags(current: str, deterministic: bool = False) -> str:
    """``XLA_FLAGS`` for a process that steps MJX environments: ``current`` plus ``DEVICE_LOOPS_FLAG`` (unless
    ``current`` already chooses the command-buffer types with ``--xla_gpu_enable_command_buffer``), plus
    ``DETERMINISTIC_FLAG`` when ``deterministic`` (unless already there). XLA reads the variable when JAX first
    initialises its GPU backend, so set it before any JAX work."""
    flags = current.split()
    if not any(f.startswith("--xla_gpu_enable_command_buffer=") for f in flags):
        flags.append(DEVICE_LOOPS_FLAG)
    if deterministic and not any(f.startswith("--xla_gpu_deterministic_ops=") for f in flags):
        flags.append(DETERMINISTIC_FLAG)
    return " ".join(flags)
