"""Writes ``torch_update_golden.pt``: the torch agent's fp32 update on fixed batches (metrics, gradients and
parameters after each of two updates: actor + temperature + critic, then critic only).

The committed file was written by this script at commit e5cba09 (the update before the device loss scaler), on the
CPU with one thread; ``tests/test_agent_torch_amp.py`` compares today's fp32 update with it. Regenerate only when the
update's maths is meant to change: ``PYTHONPATH=$PWD python tests/data/make_torch_update_golden.py``.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import torch

from tests.data.golden_batches import seeded_batches

OVERRIDES = [
    "seed=0",
    "num_threads=1",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=32",
    "agent.categorical_target_backend=torch",
]
OBS_DIM, ACT_DIM, BATCH = 17, 6, 32
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_update_golden.pt")


def fixed_batches(count: int = 2) -> list[dict[str, np.ndarray]]:
    """``count`` replay batches from a seeded numpy generator (float32; 4 terminated rows each)."""
    return seeded_batches(1234, count, BATCH, OBS_DIM, ACT_DIM, terminated_rows=4)


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    return (gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float64),
            gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32))


def snapshot(agent, state: bool) -> dict[str, dict[str, torch.Tensor]]:
    """Gradients (and with ``state`` parameters and buffers) of the four networks (cloned, on the CPU)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for name in ("actor", "critic", "target_critic", "temperature"):
        module = getattr(agent, name).module
        if state:
            out[f"{name}/state"] = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        out[f"{name}/grad"] = {k: p.grad.detach().cpu().clone() for k, p in module.named_parameters()
                               if p.grad is not None}
    return out


def run(overrides: list[str] = OVERRIDES) -> list[dict[str, object]]:
    """Two updates of a fresh agent on ``fixed_batches()``; per update its metrics and gradients, and after the
    last one every network's parameters and buffers (``snapshot``)."""
    from agent_common.config import load_config
    from agent_torch.agent import make_agent

    threads = torch.get_num_threads()
    try:
        agent = make_agent(load_config(list(overrides), "torch"), *spaces())
        records = []
        batches = fixed_batches()
        for i, batch in enumerate(batches):
            metrics = agent.update(batch)
            records.append({"metrics": metrics, **snapshot(agent, state=i == len(batches) - 1)})
        return records
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    torch.save({"overrides": OVERRIDES, "batches": fixed_batches(), "records": run()}, PATH)
    print(f"wrote {PATH} ({os.path.getsize(PATH)} bytes)")
