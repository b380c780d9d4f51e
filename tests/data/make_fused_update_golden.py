"""Writes ``fused_update_golden_torch.npz`` and ``fused_update_golden_jax.npz``: each agent's fp32 update on fixed
batches -- K = 3 updates (actor + temperature + critic, critic only, actor + temperature + critic) of a fresh agent
with fixed seeds; the metrics (losses, temperature) of every update, and after the last one every network's
parameters and BN statistics, the EMA target critic and the optimizer state (Adam moments and step counts).

The committed files were written by this script at commit 2b3c4af (the update before its weight projection,
optimizer steps and batch concatenations were batched into fewer operations), on the CPU with one torch thread;
``tests/test_fused_update.py`` compares today's update with them. Regenerate only when the update's maths is meant to
change: ``PYTHONPATH=$PWD python tests/data/make_fused_update_golden.py``.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

from tests.data.golden_batches import seeded_batches

OVERRIDES = [
    "seed=0",
    "num_threads=1",
    "agent.device_type=cpu",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=2",
    "agent.critic_num_blocks=2",
    "agent.sample_batch_size=16",
]
TORCH_OVERRIDES = [*OVERRIDES, "agent.categorical_target_backend=torch"]
JAX_OVERRIDES = [*OVERRIDES, "agent.categorical_target_backend=jax"]
OBS_DIM, ACT_DIM, BATCH, NUM_UPDATES = 17, 6, 16, 3
HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PATH = os.path.join(HERE, "fused_update_golden_torch.npz")
JAX_PATH = os.path.join(HERE, "fused_update_golden_jax.npz")


def fixed_batches(count: int = NUM_UPDATES) -> list[dict[str, np.ndarray]]:
    """``count`` replay batches from a seeded numpy generator (float32; 3 terminated rows each)."""
    return seeded_batches(2024, count, BATCH, OBS_DIM, ACT_DIM, terminated_rows=3)


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    return (gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
            gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32))


def run_torch(overrides: list[str] = TORCH_OVERRIDES) -> dict[str, np.ndarray]:
    """NUM_UPDATES updates of a fresh torch agent; ``{name: array}`` with ``metrics/<i>/<metric>``,
    ``<network>/<state key>`` and ``<network>/optimizer/<param name>/<state key>``."""
    import torch

    from agent_common.config import load_config
    from agent_torch.agent import make_agent

    threads = torch.get_num_threads()
    try:
        agent = make_agent(load_config(list(overrides), "torch"), *spaces())
        out: dict[str, np.ndarray] = {}
        for i, batch in enumerate(fixed_batches()):
            for name, value in agent.update(batch).items():
                out[f"metrics/{i}/{name}"] = np.asarray(value, np.float32)
        for net_name in ("actor", "critic", "target_critic", "temperature"):
            net = getattr(agent, net_name)
            for key, value in net.module.state_dict().items():
                out[f"{net_name}/{key}"] = value.detach().cpu().numpy().copy()
            if net.optimizer is None:
                continue
            names = {id(p): n for n, p in net.module.named_parameters()}
            for param, state in net.optimizer.state.items():
                for key, value in state.items():
                    out[f"{net_name}/optimizer/{names[id(param)]}/{key}"] = value.detach().cpu().numpy().copy()
        return out
    finally:
        torch.set_num_threads(threads)


def run_jax(overrides: list[str] = JAX_OVERRIDES) -> dict[str, np.ndarray]:
    """NUM_UPDATES updates of a fresh JAX agent; ``{name: array}`` with ``metrics/<i>/<metric>`` and every leaf of
    the agent state (parameters, BN statistics, target critic, optimizer state, PRNG key) by its tree path."""
    import jax

    from agent_common.config import load_config
    from agent_jax.agent import make_agent

    agent = make_agent(load_config(list(overrides), "jax"), *spaces())
    out: dict[str, np.ndarray] = {}
    metrics = []
    for batch in fixed_batches():
        metrics.append(agent.update(batch))  # the previous update's metrics ({} on the first call)
    metrics.append(agent.flush_metrics())
    for i, values in enumerate(metrics[1:]):
        for name, value in values.items():
            out[f"metrics/{i}/{name}"] = np.asarray(value, np.float32)
    for path, leaf in jax.tree_util.tree_leaves_with_path(jax.device_get(agent.state)):
        out[f"state{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    return out


if __name__ == "__main__":
    for path, record in ((TORCH_PATH, run_torch()), (JAX_PATH, run_jax())):
        np.savez_compressed(path, **record)
        print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(record)} arrays)")
