"""Writes ``jax_update_golden.npz``: the JAX agent's fp32 update on fixed batches (the metrics of each of two
updates -- actor + temperature + critic, then critic only -- and the whole training state after each).

The committed file was written by this script at commit 2b3c4af (the update before mixed precision), on the CPU;
``tests/test_agent_jax_amp.py`` compares today's fp32 update with it. Regenerate only when the update's maths is
meant to change: ``PYTHONPATH=$PWD python tests/data/make_jax_update_golden.py``.
"""

from __future__ import annotations

import os
import platform

import gymnasium as gym
import numpy as np

from tests.data.golden_batches import seeded_batches

OVERRIDES = [
    "seed=0",
    "num_threads=1",
    "agent.actor_hidden_dim=16",
    "agent.critic_hidden_dim=16",
    "agent.actor_num_blocks=1",
    "agent.critic_num_blocks=1",
    "agent.sample_batch_size=32",
    "agent.categorical_target_backend=jax",
]
OBS_DIM, ACT_DIM, BATCH = 17, 6, 32
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_update_golden.npz")
WRITTEN_AT = "2b3c4af"


def fixed_batches(count: int = 2) -> list[dict[str, np.ndarray]]:
    """``count`` replay batches from a seeded numpy generator (float32; 4 terminated rows each)."""
    return seeded_batches(1234, count, BATCH, OBS_DIM, ACT_DIM, terminated_rows=4)


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Box]:
    return (gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float64),
            gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32))


def flat_state(state: object) -> dict[str, np.ndarray]:
    """An AgentState's fp32 training state as {"actor/params/embed/weight": array, ...} (numpy, host).

    The networks' params, batch_stats, optimiser state, step counts, the target critic and the PRNG key; the loss
    scale of mixed precision is not part of it (the fp32 state has none)."""
    import flax.serialization
    import jax

    out: dict[str, np.ndarray] = {}
    host = jax.device_get(state)
    for net in ("actor", "critic", "temperature"):
        tree = flax.serialization.to_state_dict(getattr(host, net))
        tree = {k: v for k, v in tree.items() if k in ("params", "batch_stats", "opt_state", "step", "target_params",
                                                      "target_batch_stats")}
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
            out["/".join([net, *(str(getattr(p, "key", getattr(p, "idx", p))) for p in path)])] = np.asarray(leaf)
    out["rng"] = np.asarray(host.rng)
    return out


def machine() -> str:
    """The jax / jaxlib versions and the CPU model: where the file's values are bitwise reproducible."""
    import jax
    import jaxlib

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {model}"


def run(overrides: list[str] = OVERRIDES) -> list[dict[str, np.ndarray]]:
    """Two updates of a fresh agent on ``fixed_batches()``; per update its metrics ("metric/<name>") and the
    training state after it (``flat_state``)."""
    from agent_common.config import load_config
    from agent_jax.agent import make_agent

    agent = make_agent(load_config(list(overrides), "jax"), *spaces())
    records = []
    for batch in fixed_batches():
        agent.update(batch)
        metrics = agent.flush_metrics()
        records.append({**{f"metric/{k}": np.float32(v) for k, v in metrics.items()}, **flat_state(agent.state)})
    return records


if __name__ == "__main__":
    arrays = {f"{i}/{k}": v for i, record in enumerate(run()) for k, v in record.items()}
    np.savez(PATH, written_at=np.asarray(WRITTEN_AT), machine=np.asarray(machine()), **arrays)
    print(f"wrote {PATH} ({os.path.getsize(PATH)} bytes, {len(arrays)} arrays, {machine()})")
